"""The machine a run happens on, read from files and device facts: Jetson state, the fingerprint baselines carry.

- :mod:`~pytest_jetmem.machine.jetson`: L4T release, power mode, clocks and throttling from a Jetson's sysfs.
- :mod:`~pytest_jetmem.machine.fingerprint`: :class:`Machine`, what a baseline records of where it was measured.
"""
