"""The stack a user builds, and the path of one step through it, front to back.

    plan.py           the plan of a stack: every choice made once (plan_stack), the stack built from it (build_stack)
    vec_env.py        FastVLMRewardVecEnv, the keyword front of the SB3 stack
    gym_vector.py     the same stack behind gymnasium's vector API
    wrappers.py       the VLM reward VecEnvWrapper, RecordFrame, RewardMix
    scorer.py         the scoring half of a step, in ranges, on two streams (ChunkedScorer, plan_chunks)
    simulator_env.py  the simulator env: a MuJoCo task's envs as one SB3 VecEnv, stepped range by range
    actions.py        the one check of a step's actions

A step runs wrappers -> scorer -> simulator_env -> physics/ -> rendering/ -> frames/ -> encoders/ -> reward/.
"""
