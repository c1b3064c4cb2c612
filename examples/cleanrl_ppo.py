"""A CleanRL-style PPO loop on VLM rewards through gymnasium's vector API.

    python examples/cleanrl_ppo.py --model ViT-B-16-SigLIP2-256/webli --num-envs 64
    python examples/cleanrl_ppo.py --model vlmrm-tiny --device cpu --total-timesteps 2048   # a smoke run

``gymnasium.make_vec("vlmrm_fast/humanoid-kneeling", vectorization_mode="vector_entry_point", ...)``
gives a ``gymnasium.vector.VectorEnv`` whose envs run in the simulator env and whose rewards
are the reward model's (docs/gymnasium.md); the loop below is CleanRL's ``ppo_continuous_action.py``
in short (one file, no SB3): rollouts, GAE, clipped surrogate, value loss. Episode returns are
gymnasium's ``RecordEpisodeStatistics`` (a vector wrapper), logged by a ``NEXT_STEP``-aware print.
"""

from __future__ import annotations

import argparse
import time

import gymnasium
import numpy as np
import torch
from torch import nn

import vlmrm_fast.envs  # noqa: F401  (registers vlmrm_fast/<task> with gymnasium)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="humanoid-kneeling")
    p.add_argument("--model", default="vlmrm-tiny", help="reward model (any open_clip family, docs/models.md)")
    p.add_argument("--alpha", type=float, default=0.5)
    p.add_argument("--device", default="auto", help="the reward model's device")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--num-steps", type=int, default=128, help="steps per env per rollout")
    p.add_argument("--total-timesteps", type=int, default=100_000)
    p.add_argument("--render-size", type=int, default=None)
    p.add_argument("--episode-length", type=int, default=None)
    p.add_argument("--learning-rate", type=float, default=3e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--update-epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args(argv)


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()

        def mlp(out: int, std: float) -> nn.Sequential:
            layers = [nn.Linear(obs_dim, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, out)]
            nn.init.orthogonal_(layers[-1].weight, std)
            return nn.Sequential(*layers)

        self.critic, self.actor_mean = mlp(1, 1.0), mlp(act_dim, 0.01)
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))

    def value(self, x):
        return self.critic(x)

    def action_and_value(self, x, action=None):
        mean = self.actor_mean(x)
        dist = torch.distributions.Normal(mean, self.actor_logstd.expand_as(mean).exp())
        action = dist.sample() if action is None else action
        return action, dist.log_prob(action).sum(1), dist.entropy().sum(1), self.critic(x)


def main(argv=None) -> list[float]:
    args = parse(argv)
    torch.manual_seed(args.seed)
    extra = {k: v for k, v in (("render_size", args.render_size), ("max_episode_steps", args.episode_length)) if v}
    envs = gymnasium.make_vec(
        f"vlmrm_fast/{args.task}",
        num_envs=args.num_envs,
        vectorization_mode="vector_entry_point",
        model=args.model,
        alpha=args.alpha,
        device=args.device,
        **extra,
    )
    envs = gymnasium.wrappers.vector.RecordEpisodeStatistics(envs)
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    low, high = envs.single_action_space.low, envs.single_action_space.high
    agent = Agent(obs_dim, act_dim)
    optimizer = torch.optim.Adam(agent.parameters(), lr=args.learning_rate, eps=1e-5)
    n, t = args.num_envs, args.num_steps
    obs_buf, act_buf = torch.zeros(t, n, obs_dim), torch.zeros(t, n, act_dim)
    logp_buf, rew_buf, done_buf, val_buf = (torch.zeros(t, n) for _ in range(4))
    obs, _ = envs.reset(seed=args.seed)
    next_obs, next_done = torch.tensor(obs, dtype=torch.float32), torch.zeros(n)
    returns_seen: list[float] = []
    start = time.time()
    for iteration in range(max(1, args.total_timesteps // (n * t))):
        for step in range(t):
            obs_buf[step], done_buf[step] = next_obs, next_done
            with torch.no_grad():
                action, logp, _, value = agent.action_and_value(next_obs)
            act_buf[step], logp_buf[step], val_buf[step] = action, logp, value.flatten()
            obs, reward, terminated, truncated, info = envs.step(np.clip(action.numpy(), low, high))
            rew_buf[step] = torch.tensor(reward, dtype=torch.float32)
            next_obs = torch.tensor(obs, dtype=torch.float32)
            next_done = torch.tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
            if "episode" in info:
                returns_seen += info["episode"]["r"][info["_episode"]].tolist()
        with torch.no_grad():  # GAE; under NEXT_STEP the step after a done is a reset step (reward 0)
            advantages, last = torch.zeros(t, n), torch.zeros(n)
            next_value = agent.value(next_obs).flatten()
            for step in reversed(range(t)):
                nonterminal = 1.0 - (next_done if step == t - 1 else done_buf[step + 1])
                following = next_value if step == t - 1 else val_buf[step + 1]
                delta = rew_buf[step] + args.gamma * following * nonterminal - val_buf[step]
                last = delta + args.gamma * args.gae_lambda * nonterminal * last
                advantages[step] = last
            returns = advantages + val_buf
        b_obs, b_act = obs_buf.reshape(-1, obs_dim), act_buf.reshape(-1, act_dim)
        b_logp, b_adv, b_ret = logp_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        size = n * t
        for _ in range(args.update_epochs):
            for idx in torch.randperm(size).split(max(1, size // args.minibatches)):
                _, logp, entropy, value = agent.action_and_value(b_obs[idx], b_act[idx])
                ratio = (logp - b_logp[idx]).exp()
                adv = (b_adv[idx] - b_adv[idx].mean()) / (b_adv[idx].std() + 1e-8)
                policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip, 1 + args.clip)).mean()
                value_loss = 0.5 * ((value.flatten() - b_ret[idx]) ** 2).mean()
                loss = policy_loss + 0.5 * value_loss - 0.0 * entropy.mean()
                optimizer.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
                optimizer.step()
        steps = (iteration + 1) * size
        recent = np.mean(returns_seen[-10:]) if returns_seen else float("nan")
        print(f"steps {steps}: VLM episode return {recent:.3f}, {steps / (time.time() - start):.0f} steps/s")
    envs.close()
    return returns_seen


if __name__ == "__main__":
    main()
