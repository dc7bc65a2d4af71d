import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Kafka's own share consumer (KafkaShareConsumer, explicit acknowledgement) against a broker, for the share group
 * tests. Prints one line per delivery: "RECORD <consumer> <offset> <delivery count> <value>", then "DONE".
 *
 * Usage: ShareConsumerPeer <bootstrap> <topic> <group> <mode> <count> [<arg>]
 *   read N          warm up, produce rec-0..rec-N-1, accept each until all N were read
 *   release-first N as read, but the first delivery of rec-0 is released (it comes back with delivery count 2)
 *   release-always N LIMIT  as read, rec-0 is always released; once delivered LIMIT times a "tail" record is
 *                   produced and read (rec-0 must not come back before it)
 *   split N         two consumers in one group (record-limit acquisition, 2 a poll) read rec-0..rec-N-1 together
 *   accept-some N K warm up, produce N records, accept the first K read and close (the rest go back)
 *   consume N       no warm-up, no produce: accept until N rec-* records were read
 *   consume-acked N no warm-up, no produce, at most 5 records a poll, accepted with commitSync 100 ms later:
 *                   prints "ACKED <offset>" once the broker confirmed it (a failed one is delivered again), until
 *                   N rec-* records were confirmed; it keeps going while the broker restarts
 *
 * A share group starts at the log end (share.auto.offset.reset=latest), so "warm up" produces "warmup" records
 * until one is delivered: from then on every record produced is the group's.
 */
public class ShareConsumerPeer {
    static String bootstrap, topic, group;

    static KafkaShareConsumer<String, String> consumer(int maxPoll) {
        return consumer(maxPoll, false);
    }

    static KafkaShareConsumer<String, String> consumer(int maxPoll, boolean recordLimit) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        p.put("share.acknowledgement.mode", "explicit");
        if (maxPoll > 0) {
            p.put("max.poll.records", Integer.toString(maxPoll));
        }
        if (recordLimit) {
            p.put("share.acquire.mode", "record_limit");
        }
        KafkaShareConsumer<String, String> c = new KafkaShareConsumer<>(p);
        c.subscribe(Collections.singletonList(topic));
        return c;
    }

    static KafkaProducer<String, String> producer() {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        return new KafkaProducer<>(p);
    }

    static synchronized void print(int who, ConsumerRecord<String, String> r) {
        System.out.println("RECORD " + who + " " + r.offset() + " " + r.deliveryCount().orElse((short) -1) + " "
                + r.value());
        System.out.flush();
    }

    static void warmUp(KafkaShareConsumer<String, String> c, KafkaProducer<String, String> prod) throws Exception {
        long deadline = System.currentTimeMillis() + 60000;
        while (System.currentTimeMillis() < deadline) {
            prod.send(new ProducerRecord<>(topic, "warmup")).get();
            boolean got = false;
            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(1000))) {
                c.acknowledge(r, AcknowledgeType.ACCEPT);
                got |= r.value().equals("warmup");
            }
            c.commitSync();
            if (got) {
                System.out.println("READY");
                System.out.flush();
                return;
            }
        }
        throw new IllegalStateException("no warm-up record delivered in 60 s");
    }

    static void produce(KafkaProducer<String, String> prod, int n, String prefix) throws Exception {
        for (int i = 0; i < n; i++) {
            prod.send(new ProducerRecord<>(topic, prefix + i));
        }
        prod.flush();
    }

    public static void main(String[] args) throws Exception {
        bootstrap = args[0];
        topic = args[1];
        group = args[2];
        String mode = args[3];
        int n = Integer.parseInt(args[4]);
        long deadline = System.currentTimeMillis() + 90000;
        if (mode.equals("split")) {
            split(n, deadline);
            return;
        }
        if (mode.equals("consume-acked")) {
            consumeAcked(n, deadline);
            return;
        }
        try (KafkaShareConsumer<String, String> c = consumer(mode.equals("accept-some") ? 1 : 0);
             KafkaProducer<String, String> prod = producer()) {
            if (!mode.equals("consume")) {
                warmUp(c, prod);
                produce(prod, n, "rec-");
            }
            int limit = mode.equals("release-always") ? Integer.parseInt(args[5]) : 0;
            int keep = mode.equals("accept-some") ? Integer.parseInt(args[5]) : n;
            Set<String> accepted = new java.util.HashSet<>();
            boolean released = false, tailSent = false, tailSeen = false;
            int zeroDeliveries = 0;
            while (System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                    if (r.value().equals("warmup")) {
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        continue;
                    }
                    print(0, r);
                    if (r.value().startsWith("tail")) {
                        tailSeen = true;
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    } else if (mode.equals("release-first") && r.value().equals("rec-0") && !released) {
                        released = true;
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    } else if (mode.equals("release-always") && r.value().equals("rec-0")) {
                        zeroDeliveries++;
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    } else if (accepted.size() < keep) {
                        accepted.add(r.value());
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                    } else {
                        c.acknowledge(r, AcknowledgeType.RELEASE);
                    }
                }
                c.commitSync();
                if (mode.equals("release-always")) {
                    if (zeroDeliveries >= limit && accepted.size() >= n - 1 && !tailSent) {
                        produce(prod, 1, "tail");
                        tailSent = true;
                    }
                    if (tailSeen) {
                        break;
                    }
                } else if (accepted.size() >= keep) {
                    break;
                }
            }
            System.out.println("DONE");
            System.out.flush();
        }
    }

    static void consumeAcked(int n, long deadline) throws Exception {
        Set<Long> acked = new java.util.HashSet<>();
        try (KafkaShareConsumer<String, String> c = consumer(5)) {
            while (acked.size() < n && System.currentTimeMillis() < deadline) {
                List<ConsumerRecord<String, String>> got = new ArrayList<>();
                try {
                    for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(500))) {
                        print(0, r);
                        c.acknowledge(r, AcknowledgeType.ACCEPT);
                        got.add(r);
                    }
                    if (got.isEmpty()) {
                        continue;
                    }
                    Thread.sleep(100);  // records held in flight for a while, so a restart finds some acquired
                    boolean ok = c.commitSync().values().stream().allMatch(e -> e.isEmpty());
                    for (ConsumerRecord<String, String> r : got) {
                        if (ok) {
                            acked.add(r.offset());
                        }
                        System.out.println((ok ? "ACKED " : "ACKFAIL ") + r.offset());
                    }
                    System.out.flush();
                } catch (org.apache.kafka.common.KafkaException e) {
                    System.out.println("ERROR " + e);
                    System.out.flush();
                }
            }
        }
        System.out.println(acked.size() >= n ? "DONE" : "INCOMPLETE " + acked.size());
        System.out.flush();
    }

    static void split(int n, long deadline) throws Exception {
        Set<String> accepted = ConcurrentHashMap.newKeySet();
        java.util.concurrent.CountDownLatch polled = new java.util.concurrent.CountDownLatch(2);
        List<Thread> threads = new ArrayList<>();
        List<Throwable> failures = Collections.synchronizedList(new ArrayList<>());
        KafkaShareConsumer<String, String> first = consumer(2, true);
        try (KafkaProducer<String, String> prod = producer()) {
            warmUp(first, prod);
            for (int who = 0; who < 2; who++) {
                final int me = who;
                Thread t = new Thread(() -> {
                    try (KafkaShareConsumer<String, String> c = me == 0 ? first : consumer(2, true)) {
                        int polls = 0;
                        while (accepted.size() < n && System.currentTimeMillis() < deadline) {
                            for (ConsumerRecord<String, String> r : c.poll(Duration.ofMillis(200))) {
                                c.acknowledge(r, AcknowledgeType.ACCEPT);
                                if (!r.value().equals("warmup")) {
                                    print(me, r);
                                    accepted.add(r.value());
                                }
                            }
                            c.commitSync();
                            if (++polls == 3) {
                                polled.countDown();
                            }
                        }
                    } catch (Throwable e) {
                        failures.add(e);
                    }
                });
                threads.add(t);
                t.start();
            }
            polled.await();  // both consumers joined and fetching: records are shared between them
            for (int i = 0; i < n; i++) {
                prod.send(new ProducerRecord<>(topic, "rec-" + i)).get();  // one batch each
            }
            for (Thread t : threads) {
                t.join();
            }
        }
        if (!failures.isEmpty()) {
            throw new RuntimeException(failures.get(0));
        }
        System.out.println("DONE");
        System.out.flush();
    }
}
