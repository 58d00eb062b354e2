"""Shared memory (Triton's ``SharedMemoryManager``): registered regions, tensor reads and writes in
them, and the service behind the ``Server``'s shared-memory methods."""
