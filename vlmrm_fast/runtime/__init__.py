"""The machine a stack runs on.

device.py     devices ("auto", the CPU, cuda:N), resolved once; the native core's build information
memory.py     the process's memory: a batch's needs checked before it is allocated, freed memory handed back
native.py     loads libmujoco, then the native core (every module that calls the core imports it first)
kernels.py    the native kernels' dtypes, and whether the CUDA kernels run for a device
warp.py       Warp itself: its import with the install hint, its quiet start-up, a Warp stream per torch stream
profiling.py  stage timing
health.py     what a run loads, checked: a broken install named with its fix
"""
