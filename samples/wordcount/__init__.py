"""Word count on the malhar engine (the smoke sample until the Kafka -> PostgreSQL flagship lands)."""
