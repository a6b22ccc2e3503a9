"""Critical status and retention (`purge`), and the plain values they answer with (`reports`)."""
