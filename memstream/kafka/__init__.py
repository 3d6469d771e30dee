"""Talking to a Kafka broker: topic administration, offsets, group members, record headers."""
