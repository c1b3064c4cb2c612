"""Frames: where a drawn frame lies, and the frames made into an encoder's input.

views.py       FrameLayout, FrameView, HostFrames, the frame-source protocols
preprocess.py  frames -> encoder input, bit-identical to open_clip's transform (the native kernels)
"""
