// Kafka 3.9's password encoder (ZooKeeper mode's password.encoder.*) for the tests: "encode <secret> <cipher>
// <keyLength> <password>" prints Kafka's stored text, "decode <secret> <cipher> <keyLength> <text>" prints the password
// (Kafka reads the cipher's parameters with its configured cipher, so the two must agree).
import org.apache.kafka.common.config.types.Password;
import org.apache.kafka.security.PasswordEncoder;

public class PasswordEncoderPeer {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("encode")) {
            PasswordEncoder encoder = PasswordEncoder.encrypting(new Password(args[1]), null, args[2],
                    Integer.parseInt(args[3]), 4096);
            System.out.println(encoder.encode(new Password(args[4])));
        } else {
            PasswordEncoder encoder = PasswordEncoder.encrypting(new Password(args[1]), null, args[2],
                    Integer.parseInt(args[3]), 4096);
            System.out.println(encoder.decode(args[4]).value());
        }
    }
}
