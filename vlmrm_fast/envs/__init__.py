"""Named tasks: the paper's humanoid poses, CartPole and MountainCar, with their prompts.

The built-in tasks are the paper's (Rocamonde et al., 2024):

* ``humanoid-<pose>``: Humanoid-v5 in the paper's scene (``envs.humanoid``); another
  scene is named after an ``@``: ``humanoid-kneeling@builtin``, ``@gymnasium``,
  ``@paper-textures`` (see ``envs.humanoid.SCENES``).
* ``cartpole``, ``mountain-car``, ``mountain-car-textured``: the paper's semantics
  (no early termination, a fixed episode length, ``info["success"]`` on every step;
  ``envs.classic_control``). Stock gymnasium semantics stay under gymnasium's ids
  (``CartPole-v1``, ``MountainCarContinuous-v0``; the textured stock variant is
  ``vlmrm_fast/MountainCarContinuousTextured-v0``), which take the same prompts.

The 600x400 classic-control frames are squashed to the encoder's square input, as
the paper's pipeline does; open_clip's centre crop would cut the flag and the
track's ends out of view.

Tasks drawn with the paper's textures (the humanoid's ``paper`` and ``paper-textures`` scenes,
``mountain-car-textured``) can load the paper's own image files instead of the generated ones
(``TaskSpec.with_scene_assets``; see ``envs.paper_assets``). How an episode ends at its length,
a truncation or (as in the paper's code) a termination, is ``time_limit`` (``envs.time_limits``).

gymnasium's MuJoCo v5 suite (``Ant-v5``, ``HalfCheetah-v5``, ... ``InvertedDoublePendulum-v5``) are tasks
under gymnasium's own ids, with default prompts, run in the simulator env bit for bit as gymnasium's envs
(``envs.mujoco_suite``); another camera of the model after an ``@`` (``Ant-v5@track``).

``get_task(name)`` returns a :class:`TaskSpec`. MuJoCo tasks (those with a ``vector_task``)
run entirely in the simulator env (``vlmrm_fast/stack/simulator_env.py``); the others go through gymnasium environments
(``env.render()`` frames) on the generic path. Any gymnasium id works as a task
too, with prompts given by the caller.
"""

from vlmrm_fast.envs import registration  # noqa: F401  (registers the tasks with gymnasium)
from vlmrm_fast.envs.registration import make_task_env
from vlmrm_fast.envs.tasks import GYM_NAMESPACE, TASKS, TaskSpec, get_task

__all__ = ["GYM_NAMESPACE", "TASKS", "TaskSpec", "get_task", "make_task_env"]
