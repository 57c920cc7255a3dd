"""What is trained, the same in both frameworks: settings, the model spec, the shared initial
weights, the data plan, precision and distribution, the parity check."""
