"""Measurement campaigns that are not the product's control loop: they run the lab or the
simulator many times over and turn what they measure into models and reports. ``prima``
profiles and validates PRIMA's capacity models; ``multicore`` measures a server whose soft
interrupts load some cores and fits Chen et al.'s model to it."""
