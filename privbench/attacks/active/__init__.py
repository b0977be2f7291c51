"""The active server: it crafts the victim's download and reads the reply (imprint, trap weights, a trap behind
an invertible layer; isolating a victim inside a secure aggregate). ``README.md`` says what it measures."""
