"""The machine at hand: what each framework sees, the doctor, the device guard, NVML and peak
FLOPs."""
