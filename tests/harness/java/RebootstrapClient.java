import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's Java producer, consumer and admin client, kept alive while a Python test swaps the broker
 * under them (tests/client/test_rebootstrap_peers.py drives it; it is compiled against the peer's
 * Kafka 4.4 jars).
 *
 * Arguments: client settings as key=value (applied to all three clients). Commands, one per line on
 * stdin; one answer line each on stdout, "OK ..." or "ERR <exception class>: <message>":
 *   produce TOPIC PREFIX N    N records PREFIX0..; waits for every acknowledgement
 *   subscribe TOPIC GROUP     the consumer joins GROUP for TOPIC (earliest, no auto commit)
 *   consume N TIMEOUT_MS      polls until N records arrived; commits; answers their values
 *   create TOPIC PARTITIONS   admin CreateTopics
 *   list                      admin ListTopics, names comma-separated
 *   quit
 */
public final class RebootstrapClient {
    private static Properties settings;
    private static KafkaProducer<String, String> producer;
    private static KafkaConsumer<String, String> consumer;
    private static Admin admin;

    public static void main(String[] args) throws Exception {
        settings = new Properties();
        for (String arg : args) {
            int eq = arg.indexOf('=');
            settings.put(arg.substring(0, eq), arg.substring(eq + 1));
        }
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.out.println("READY");
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.trim().split(" ");
            if (cmd[0].equals("quit")) {
                break;
            }
            String answer;
            try {
                answer = "OK " + run(cmd);
            } catch (ExecutionException e) {
                answer = "ERR " + e.getCause().getClass().getName() + ": " + e.getCause().getMessage();
            } catch (Exception e) {
                answer = "ERR " + e.getClass().getName() + ": " + e.getMessage();
            }
            System.out.println(answer.replace('\n', ' '));
        }
        if (producer != null) {
            producer.close(Duration.ofSeconds(5));
        }
        if (consumer != null) {
            consumer.close(Duration.ofSeconds(5));
        }
        if (admin != null) {
            admin.close(Duration.ofSeconds(5));
        }
    }

    private static Properties props(String... extra) {
        Properties p = new Properties();
        p.putAll(settings);
        for (int i = 0; i < extra.length; i += 2) {
            p.put(extra[i], extra[i + 1]);
        }
        return p;
    }

    private static String run(String[] cmd) throws Exception {
        switch (cmd[0]) {
            case "produce": {
                if (producer == null) {
                    producer = new KafkaProducer<>(props(), new StringSerializer(), new StringSerializer());
                }
                int n = Integer.parseInt(cmd[3]);
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    sent.add(producer.send(new ProducerRecord<>(cmd[1], "k" + i, cmd[2] + i)));
                }
                producer.flush();
                for (Future<RecordMetadata> f : sent) {
                    f.get();
                }
                return String.valueOf(n);
            }
            case "subscribe": {
                consumer = new KafkaConsumer<>(props("group.id", cmd[2], "auto.offset.reset", "earliest",
                        "enable.auto.commit", "false"), new StringDeserializer(), new StringDeserializer());
                consumer.subscribe(Collections.singletonList(cmd[1]));
                return "";
            }
            case "consume": {
                int n = Integer.parseInt(cmd[1]);
                long deadline = System.currentTimeMillis() + Long.parseLong(cmd[2]);
                List<String> values = new ArrayList<>();
                while (values.size() < n && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        values.add(r.value());
                    }
                }
                consumer.commitSync();
                return String.join(",", values);
            }
            case "create": {
                if (admin == null) {
                    admin = Admin.create(props());
                }
                admin.createTopics(Collections.singletonList(new NewTopic(cmd[1], Integer.parseInt(cmd[2]),
                        (short) 1))).all().get();
                return cmd[1];
            }
            case "list": {
                if (admin == null) {
                    admin = Admin.create(props());
                }
                return String.join(",", new TreeSet<>(admin.listTopics().names().get(60, TimeUnit.SECONDS)));
            }
            default:
                throw new IllegalArgumentException("unknown command " + cmd[0]);
        }
    }
}
