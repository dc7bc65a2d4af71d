// Kafka Streams WordCount with processing.guarantee=exactly_once_v2, the application tests/apps runs against
// tierlog and Apache Kafka. Counts are forwarded on every update (no record cache), so a word seen n times
// yields the committed values 1, 2, ..., n on the output topic, and any duplicated or lost update shows.
//
// Arguments: bootstrap application-id input-topic output-topic state-dir gate-word gate-dir [key=value ...]
// (extra pairs are Streams settings). The gate holds a transaction open for a fault test: when the count
// of gate-word has been handed to the output topic's producer and gate-dir/release does not exist yet, the
// stream thread writes gate-dir/held and waits for gate-dir/release, the file the test creates.
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.KStream;

public final class WordCount {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], appId = args[1], input = args[2], output = args[3], stateDir = args[4];
        String gateWord = args[5];
        Path gate = Path.of(args[6]);

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, appId);
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);  // one broker
        props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir);
        props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
        props.put(StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.StringSerde.class);
        props.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        for (int i = 7; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            props.put(kv[0], kv[1]);
        }

        StreamsBuilder builder = new StreamsBuilder();
        KStream<String, String> counts = builder.<String, String>stream(input)
            .flatMapValues(line -> Arrays.asList(line.toLowerCase().split("\\W+")))
            .filter((key, word) -> !word.isEmpty())
            .groupBy((key, word) -> word)
            .count()
            .toStream()
            .mapValues(count -> Long.toString(count));
        counts.to(output);
        // A sibling of the sink, so it sees each count after the sink has sent it.
        counts.foreach((word, count) -> {
            if (word.equals(gateWord)) {
                hold(gate);
            }
        });

        KafkaStreams streams = new KafkaStreams(builder.build(), props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.out.println("STATE " + now);
            System.out.flush();
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close();
            stopped.countDown();
        }));
        streams.start();
        stopped.await();
    }

    private static void hold(Path gate) {
        Path release = gate.resolve("release");
        if (Files.exists(release)) {
            return;
        }
        try {
            Files.writeString(gate.resolve("held"), "held\n");
            System.out.println("GATE HELD");
            System.out.flush();
            while (!Files.exists(release)) {
                Thread.sleep(20);
            }
        } catch (IOException | InterruptedException e) {
            throw new RuntimeException(e);
        }
        System.out.println("GATE RELEASED");
        System.out.flush();
    }
}
