"""The kernels of :mod:`vlmrm_fast.physics.warp` that MuJoCo Warp has no function for: the gather of
Data fields into one packed buffer (what makes the outputs one copy per step), the write of given
qpos/qvel rows into the reset worlds, and the per-world check of the state (C MuJoCo's
``mj_checkPos``/``mj_checkVel``/``mj_checkAcc``) with MuJoCo Warp's overflow flags.
"""

from __future__ import annotations

import mujoco

from vlmrm_fast.runtime.warp import import_warp

import_warp()  # names the install extra where MuJoCo Warp is missing; initializes Warp quietly
import mujoco_warp as mjw  # noqa: E402
import warp as wp  # noqa: E402

# MuJoCo's warning bits (mjtWarning), as BatchSimulator.last_warnings sets them.
_BADQPOS = wp.constant(1 << int(mujoco.mjtWarning.mjWARN_BADQPOS))
_BADQVEL = wp.constant(1 << int(mujoco.mjtWarning.mjWARN_BADQVEL))
_BADQACC = wp.constant(1 << int(mujoco.mjtWarning.mjWARN_BADQACC))
_CONTACTFULL = wp.constant(1 << int(mujoco.mjtWarning.mjWARN_CONTACTFULL))
_CNSTRFULL = wp.constant(1 << int(mujoco.mjtWarning.mjWARN_CNSTRFULL))
BAD_STATE_BITS = (1 << int(mujoco.mjtWarning.mjWARN_BADQPOS)) | (1 << int(mujoco.mjtWarning.mjWARN_BADQVEL))
BAD_STATE_BITS |= 1 << int(mujoco.mjtWarning.mjWARN_BADQACC)
# What C MuJoCo's mj_checkPos/Vel/Acc call bad: NaN, inf or a magnitude above mjMAXVAL.
_MAXVAL = wp.constant(wp.float32(mujoco.mjMAXVAL))
# MuJoCo Warp's overflow bits (mjw.OverflowType) that C MuJoCo reports as a full contact buffer or
# full constraint rows; it also flags solver iteration limits, which C MuJoCo does not warn of.
_O = mjw.OverflowType
_CONSTRAINT_OVERFLOW = wp.constant(int(_O.NEFC | _O.NJMAX_NNZ | _O.NVMAX))
_CONTACT_OVERFLOW = wp.constant(
    int(_O.BROADPHASE | _O.NARROWPHASE | _O.CCD | _O.HFIELD | _O.CONTACT_MATCH | _O.EPA_HORIZON | _O.TACTILE)
)


@wp.kernel
def gather_columns(
    source: wp.array2d[wp.float32],
    start: int,
    column: int,
    worlds: wp.array[wp.bool],
    packed: wp.array2d[wp.float64],
):
    world, k = wp.tid()
    if worlds[world]:
        packed[world, column + k] = wp.float64(source[world, start + k])


@wp.func
def _bad(value: wp.float32) -> bool:
    return not wp.isfinite(value) or wp.abs(value) > _MAXVAL


@wp.kernel
def check_worlds(
    qpos: wp.array2d[wp.float32],
    qvel: wp.array2d[wp.float32],
    qacc: wp.array2d[wp.float32],
    overflow: wp.array[wp.int32],
    worlds: wp.array[wp.bool],
    warning_bits: wp.array[wp.float64],
):
    """Each world's MuJoCo warning bits since its last check; clears MuJoCo Warp's (sticky) overflow bits."""
    world = wp.tid()
    if not worlds[world]:
        return
    bits = wp.int32(0)
    for i in range(qpos.shape[1]):
        if _bad(qpos[world, i]):
            bits = bits | _BADQPOS
    for i in range(qvel.shape[1]):
        if _bad(qvel[world, i]):
            bits = bits | _BADQVEL
        if _bad(qacc[world, i]):
            bits = bits | _BADQACC
    flags = overflow[world]
    if flags & _CONTACT_OVERFLOW:
        bits = bits | _CONTACTFULL
    if flags & _CONSTRAINT_OVERFLOW:
        bits = bits | _CNSTRFULL
    overflow[world] = 0
    warning_bits[world] = wp.float64(bits)


@wp.kernel
def set_reset_state(
    worlds: wp.array[wp.bool],
    rows: wp.array2d[wp.float32],
    qpos: wp.array2d[wp.float32],
    qvel: wp.array2d[wp.float32],
    cacc: wp.array2d[wp.spatial_vector],
    cfrc_int: wp.array2d[wp.spatial_vector],
    cfrc_ext: wp.array2d[wp.spatial_vector],
):
    """qpos and qvel of the reset worlds from their rows; zeros in the fields only rne_postconstraint
    computes (mj_resetData zeroes them and mj_forward leaves them; mujoco_warp.reset_data leaves them as they were)."""
    world = wp.tid()
    if not worlds[world]:
        return
    nq = qpos.shape[1]
    for i in range(nq):
        qpos[world, i] = rows[world, i]
    for i in range(qvel.shape[1]):
        qvel[world, i] = rows[world, nq + i]
    zero = wp.spatial_vector(0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    for b in range(cacc.shape[1]):
        cacc[world, b] = zero
        cfrc_int[world, b] = zero
        cfrc_ext[world, b] = zero
