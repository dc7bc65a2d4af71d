// A producer interceptor that holds a Kafka Connect source task's transaction open for a fault test of
// tests/apps. The JVM's gate.topic (one partition) and gate.value name a record; once the broker has
// acknowledged it and the file gate.dir/release does not exist yet, the producer's network thread writes
// gate.dir/held and waits for release (the test creates it). The record is then in the log and its
// transaction still open: the task's commit waits on this thread.
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;

import org.apache.kafka.clients.producer.ProducerInterceptor;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;

public final class GateInterceptor implements ProducerInterceptor<byte[], byte[]> {
    private String gateTopic;
    private byte[] gateValue;
    // Records of gate.topic sent and acknowledged so far; acknowledgements of one partition come in send order.
    private long sent;
    private long acknowledged;
    private volatile long gateIndex = -1;

    @Override
    public ProducerRecord<byte[], byte[]> onSend(ProducerRecord<byte[], byte[]> record) {
        if (record.topic().equals(gateTopic)) {
            if (gateIndex < 0 && Arrays.equals(record.value(), gateValue)) {
                gateIndex = sent;
            }
            sent++;
        }
        return record;
    }

    @Override
    public void onAcknowledgement(RecordMetadata metadata, Exception exception) {
        if (metadata == null || !metadata.topic().equals(gateTopic)) {
            return;
        }
        long index = acknowledged++;
        if (exception != null || index != gateIndex) {
            return;
        }
        Path dir = Path.of(System.getProperty("gate.dir"));
        Path release = dir.resolve("release");
        try {
            if (Files.exists(release)) {
                return;
            }
            Files.writeString(dir.resolve("held"), "held\n");
            while (!Files.exists(release)) {
                Thread.sleep(20);
            }
        } catch (Exception e) {
            throw new RuntimeException(e);
        }
    }

    @Override
    public void close() {
    }

    @Override
    public void configure(Map<String, ?> configs) {
        gateTopic = System.getProperty("gate.topic", "");
        gateValue = System.getProperty("gate.value", "").getBytes();
    }
}
