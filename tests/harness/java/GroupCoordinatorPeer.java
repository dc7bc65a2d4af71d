import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordHelpers;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;
import org.apache.kafka.coordinator.group.api.assignor.ConsumerGroupPartitionAssignor;
import org.apache.kafka.coordinator.group.api.assignor.GroupAssignment;
import org.apache.kafka.coordinator.group.api.assignor.MemberAssignment;
import org.apache.kafka.coordinator.group.api.assignor.SubscribedTopicDescriber;
import org.apache.kafka.coordinator.group.api.assignor.SubscriptionType;
import org.apache.kafka.coordinator.group.assignor.RangeAssignor;
import org.apache.kafka.coordinator.group.assignor.UniformAssignor;
import org.apache.kafka.coordinator.group.modern.Assignment;
import org.apache.kafka.coordinator.group.modern.GroupSpecImpl;
import org.apache.kafka.coordinator.group.modern.MemberSubscriptionAndAssignmentImpl;
import org.apache.kafka.coordinator.group.modern.consumer.ResolvedRegularExpression;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;

/**
 * Kafka 4.4's server-side assignors and group coordinator record serde, driven by one JSON request per
 * stdin line and answering one JSON line each (tests/coordinator/test_consumer_group_as_kafka.py).
 * "assign": members (in the order given: GroupSpecImpl.memberIds() is the map's key order) and topics with
 * partition racks -> each member's target assignment. "regex_record": the bytes of a
 * ConsumerGroupRegularExpression record and its tombstone as Kafka writes them to __consumer_offsets.
 */
public class GroupCoordinatorPeer {
    private static final ObjectMapper JSON = new ObjectMapper();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            JsonNode request = JSON.readTree(line);
            JsonNode answer = "assign".equals(request.get("kind").asText()) ? assign(request) : regexRecord(request);
            System.out.println(JSON.writeValueAsString(answer));
            System.out.flush();
        }
    }

    private static JsonNode assign(JsonNode request) {
        Map<Uuid, Integer> partitions = new HashMap<>();
        Map<Uuid, Map<Integer, Set<String>>> racks = new HashMap<>();
        request.get("topics").properties().forEach(e -> {
            Uuid id = Uuid.fromString(e.getKey());
            partitions.put(id, e.getValue().get("partitions").asInt());
            Map<Integer, Set<String>> byPartition = new HashMap<>();
            e.getValue().get("racks").properties().forEach(r -> {
                Set<String> set = new HashSet<>();
                r.getValue().forEach(v -> set.add(v.asText()));
                byPartition.put(Integer.parseInt(r.getKey()), set);
            });
            racks.put(id, byPartition);
        });
        SubscribedTopicDescriber describer = new SubscribedTopicDescriber() {
            public int numPartitions(Uuid topicId) {
                return partitions.getOrDefault(topicId, -1);
            }
            public Set<String> racksForPartition(Uuid topicId, int partition) {
                return racks.getOrDefault(topicId, Map.of()).getOrDefault(partition, Set.of());
            }
        };
        Map<String, MemberSubscriptionAndAssignmentImpl> members = new LinkedHashMap<>();
        Map<Uuid, Map<Integer, String>> owners = new HashMap<>();
        Set<Set<Uuid>> subscriptions = new HashSet<>();
        for (JsonNode m : request.get("members")) {
            String memberId = m.get("id").asText();
            Set<Uuid> topics = new LinkedHashSet<>();
            m.get("topics").forEach(t -> topics.add(Uuid.fromString(t.asText())));
            subscriptions.add(topics);
            Map<Uuid, Set<Integer>> current = new HashMap<>();
            m.get("assignment").properties().forEach(e -> {
                Uuid id = Uuid.fromString(e.getKey());
                Set<Integer> ps = new HashSet<>();
                e.getValue().forEach(p -> {
                    ps.add(p.asInt());
                    owners.computeIfAbsent(id, k -> new HashMap<>()).put(p.asInt(), memberId);
                });
                current.put(id, Collections.unmodifiableSet(ps));
            });
            members.put(memberId, new MemberSubscriptionAndAssignmentImpl(
                optional(m, "rack"), optional(m, "instance"), Collections.unmodifiableSet(topics),
                new Assignment(Collections.unmodifiableMap(current))));
        }
        SubscriptionType type = subscriptions.size() <= 1 ? SubscriptionType.HOMOGENEOUS : SubscriptionType.HETEROGENEOUS;
        ConsumerGroupPartitionAssignor assignor = "range".equals(request.get("assignor").asText())
            ? new RangeAssignor() : new UniformAssignor();
        GroupAssignment result = assignor.assign(new GroupSpecImpl(members, type, owners), describer);
        ObjectNode answer = JSON.createObjectNode();
        for (Map.Entry<String, MemberAssignment> e : result.members().entrySet()) {
            ObjectNode byTopic = answer.putObject(e.getKey());
            e.getValue().partitions().forEach((topic, ps) -> {
                if (ps.isEmpty()) return;
                ArrayNode list = byTopic.putArray(topic.toString());
                new TreeSet<>(ps).forEach(list::add);
            });
        }
        return answer;
    }

    private static Optional<String> optional(JsonNode node, String field) {
        JsonNode v = node.get(field);
        return v == null || v.isNull() ? Optional.empty() : Optional.of(v.asText());
    }

    private static JsonNode regexRecord(JsonNode request) {
        String group = request.get("group").asText();
        String regex = request.get("regex").asText();
        Set<String> topics = new LinkedHashSet<>();
        request.get("topics").forEach(t -> topics.add(t.asText()));
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        CoordinatorRecord record = GroupCoordinatorRecordHelpers.newConsumerGroupRegularExpressionRecord(group, regex,
            new ResolvedRegularExpression(topics, request.get("version").asLong(), request.get("timestamp").asLong()));
        CoordinatorRecord tombstone = GroupCoordinatorRecordHelpers.newConsumerGroupRegularExpressionTombstone(group, regex);
        ObjectNode answer = JSON.createObjectNode();
        answer.put("key", hex(serde.serializeKey(record)));
        answer.put("value", hex(serde.serializeValue(record)));
        answer.put("tombstone_key", hex(serde.serializeKey(tombstone)));
        answer.put("tombstone_value", tombstone.value() == null ? null : hex(serde.serializeValue(tombstone)));
        return answer;
    }

    private static String hex(byte[] bytes) {
        StringBuilder s = new StringBuilder();
        for (byte b : bytes) s.append(String.format("%02x", b));
        return s.toString();
    }
}
