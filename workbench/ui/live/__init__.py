"""The Live tab: throughput, latency, queue vs compute, batch sizes, GPU readings, and why p99 is high."""
