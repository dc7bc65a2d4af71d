// Kafka's Java transactional producer and read_committed consumer, for tests against tierlog
// (tests/harness/java_transactions.py compiles it against Kafka 4.4's client jars).
//
//   produce <bootstrap> <topic> <transactional id> <plan>   plan: "c3,a2,c1" = commit 3 records, abort 2, ...
//       values are "<txn index>-<c|a>-<record index>" padded with "x"; prints "DONE <records committed>"
//   consume <bootstrap> <topic> <isolation level> <until> <timeout ms>
//       assign partition 0 from the earliest offset; prints "<offset> <value>" per record up to and including
//       the record whose value is <until>, then "DONE"; "TIMEOUT" if it never comes
import java.time.Duration;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TransactionalClients {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("produce")) {
            produce(args[1], args[2], args[3], args[4]);
        } else {
            consume(args[1], args[2], args[3], args[4], Long.parseLong(args[5]));
        }
    }

    static void produce(String bootstrap, String topic, String txnId, String plan) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "5");
        int committed = 0;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            String[] steps = plan.split(",");
            for (int i = 0; i < steps.length; i++) {
                boolean commit = steps[i].charAt(0) == 'c';
                int n = Integer.parseInt(steps[i].substring(1));
                producer.beginTransaction();
                for (int j = 0; j < n; j++) {
                    String value = i + "-" + steps[i].charAt(0) + "-" + j + "-" + "x".repeat(200);
                    producer.send(new ProducerRecord<>(topic, 0, null, value));
                }
                producer.flush();  // on the broker before the end: an abort must hide records really written
                if (commit) {
                    producer.commitTransaction();
                    committed += n;
                } else {
                    producer.abortTransaction();
                }
            }
        }
        System.out.println("DONE " + committed);
    }

    static void consume(String bootstrap, String topic, String isolation, String until, long timeoutMs) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("isolation.level", isolation);
        p.put("enable.auto.commit", "false");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(topic, 0);
        long deadline = System.currentTimeMillis() + timeoutMs;
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
            consumer.assign(List.of(tp));
            consumer.seekToBeginning(List.of(tp));
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println(r.offset() + " " + r.value());
                    if (r.value().equals(until)) {
                        System.out.println("DONE");
                        return;
                    }
                }
            }
        }
        System.out.println("TIMEOUT");
    }
}
