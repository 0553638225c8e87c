"""TensorBoard event files of a learning run, read back by TensorBoard's own reader (its
EventAccumulator): the learner's and the dashboard's scalars, a resume that continues
the curves with no step twice (a killed run's tail beyond the checkpoint purged), and
the recipe key that turns it off."""

from __future__ import annotations

import json

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch.utils.tensorboard import SummaryWriter

from w3async.learn.checkpoint import load_latest
from w3async.observe.tensorboard import TB_DIR

from tests.learn.test_training import learn_recipe, lines, run

LEARNER_TAGS = ("learner/policy_loss", "learner/value_loss", "learner/entropy", "learner/approx_kl",
                "learner/clip_frac", "learner/staleness", "learner/update_s", "learner/wait_s")
RUN_TAGS = ("run/steps_per_s", "run/restarts", "rounds/latency_ms_mean", "rounds/latency_ms_p95",
            "rounds/latency_ms_max", "rounds/compute_ms_mean")


def read(run_dir) -> EventAccumulator:
    acc = EventAccumulator(str(run_dir / TB_DIR), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def steps(acc, tag) -> list[int]:
    return [e.step for e in acc.Scalars(tag)]


async def test_scalars_read_back_and_a_resume_continues_them(tmp_path, null_native):
    run_dir = tmp_path / "run"
    data = learn_recipe(stop={"updates": 4, "seconds": 120})
    await run(data, run_dir)
    acc = read(run_dir)
    tags = set(acc.Tags()["scalars"])
    assert set(LEARNER_TAGS) | set(RUN_TAGS) <= tags, sorted(tags)
    ups = lines(run_dir / "learner.jsonl", "update")
    assert [e.value for e in acc.Scalars("learner/updates")] == [u["update"] for u in ups]
    assert [round(e.value, 4) for e in acc.Scalars("learner/policy_loss")] == [round(u["policy_loss"], 4) for u in ups]
    first = steps(acc, "learner/policy_loss")
    ckpt = load_latest(run_dir)
    saved_steps = ckpt["counters"]["agent_steps"]
    assert first == sorted(set(first)) and first[-1] <= saved_steps
    # CleanRL's names: charts/SPS beside run/steps_per_s; the training episodes' mean
    # return and length (the null game's episodes are all one length)
    assert [e.value for e in acc.Scalars("charts/SPS")] == [e.value for e in acc.Scalars("run/steps_per_s")]
    lengths = {e["steps"] for e in lines(run_dir / "episodes.jsonl", "episode") if not e["eval"]}
    assert len(lengths) == 1 and {e.value for e in acc.Scalars("charts/episodic_length")} == lengths
    assert all(0.0 <= e.value <= max(lengths) for e in acc.Scalars("charts/episodic_return"))  # reward 0 or 1 a step

    # A killed run's tail: events beyond the checkpoint's step that a resume must drop.
    with SummaryWriter(str(run_dir / TB_DIR)) as w:
        for k in range(3):
            w.add_scalar("learner/policy_loss", 99.0, saved_steps + 1000 + k)
            w.add_scalar("run/steps_per_s", 99.0, saved_steps + 1000 + k)

    data["stop"] = {"updates": ckpt["learner"]["version"] + 3, "seconds": 120}
    await run(data, run_dir)
    acc = read(run_dir)
    loss = acc.Scalars("learner/policy_loss")
    after = [e.step for e in loss]
    assert 99.0 not in [e.value for e in loss] + [e.value for e in acc.Scalars("run/steps_per_s")]
    assert after == sorted(set(after)), after  # no step twice, none out of order
    assert after[: len(first)] == first and len(after) >= len(first) + 3
    assert min(after[len(first):]) >= saved_steps  # the resumed run goes on from the checkpoint's steps
    ups = lines(run_dir / "learner.jsonl", "update")
    assert [e.value for e in acc.Scalars("learner/updates")] == [u["update"] for u in ups]
    for tag in RUN_TAGS:
        s = steps(acc, tag)
        assert s == sorted(set(s)), (tag, s)


async def test_the_recipe_key_turns_it_off(tmp_path, null_native):
    run_dir = tmp_path / "run"
    await run(learn_recipe(stop={"updates": 1, "seconds": 60}, status={"tensorboard": False}), run_dir)
    assert not (run_dir / TB_DIR).exists()
    assert lines(run_dir / "learner.jsonl", "update")
    rec = json.loads((run_dir / "recipe.json").read_text())
    assert rec["status"]["tensorboard"] is False
