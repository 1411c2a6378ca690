"""Orders from Kafka -> parse JSON -> dedup -> enrich from PostgreSQL -> top products per
application window -> PostgreSQL, exactly once (``python -m samples.orders_top_products``)."""
