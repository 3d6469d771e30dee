"""Storage adapters behind typed ports. Knows nothing of Kafka."""
