"""Sample: clicks per user in sliding event-time windows, Kafka -> PostgreSQL, exactly once."""
