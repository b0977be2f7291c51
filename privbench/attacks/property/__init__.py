"""Property inference: a property of a client's data (its class set) from what it sent."""
