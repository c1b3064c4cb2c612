"""When an episode counts as a success, from the ``info["success"]`` of each of its steps.

The paper's envs report on every step whether the task is done (``envs.classic_control``); the
paper's evaluation (its ``eval_on_toy_rl_env``) turns those into one verdict per episode by a
rule of each task (``TaskSpec.success_rule``):

* ``"every_step"`` (CartPole): the pole stayed upright on every step of the episode; a pole that
  falls and swings back up has failed.
* ``"any_step"`` (MountainCar): the car reached the flag at some step.

Beside the task's rule the training logs keep two other views of the same steps: whether the last
step succeeded, and the share of the steps that did.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

#: The rules, by name: whether an episode succeeded, from how many of its steps did and how many it had.
SUCCESS_RULES: dict[str, Callable[[int, int], bool]] = {
    "every_step": lambda succeeded, steps: succeeded == steps,
    "any_step": lambda succeeded, steps: succeeded > 0,
}
#: The log key of each rule's success rate (under ``rollout/``), named after what it counts.
RATE_NAMES = {"every_step": "success_every_step_rate", "any_step": "success_any_step_rate"}
#: The log key of the rate of episodes whose last step succeeded.
LAST_STEP_RATE = "success_at_last_step_rate"


def check_rule(rule: str | None) -> str | None:
    """``rule`` if it names a rule (None passes: a task without one)."""
    if rule is not None and rule not in SUCCESS_RULES:
        raise ValueError(f"success rule {rule!r} is not one of {', '.join(SUCCESS_RULES)}")
    return rule


def rule_holds(rule: str, succeeded: int, steps: int) -> bool:
    """The episode's success under ``rule``, ``succeeded`` of its ``steps`` steps having succeeded."""
    return bool(SUCCESS_RULES[check_rule(rule)](succeeded, steps))


def episode_success(step_successes: Iterable[bool], rule: str) -> bool:
    """The episode's success under ``rule`` from its steps' ``info["success"]`` values, in order."""
    flags = [bool(s) for s in step_successes]
    return rule_holds(rule, sum(flags), len(flags))
