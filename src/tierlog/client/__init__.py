"""tierlog's Kafka client: an asyncio core with Producer, Consumer and Admin, and a synchronous facade."""
