"""Clients that act on the brokers: publishers with confirms, consumers with acks, the final drain."""
