"""The policies `w3async eval` plays (evaluate.py): a checkpoint named by a file or a run
folder (`resolve`), its recipe and network with its weights (`load_policy`), and the
opponent of `--against` (`against`). Bad input is an EvalError naming the file and why."""

from __future__ import annotations

from pathlib import Path

from w3async import games
from w3async.files import describe
from w3async.run_folder import RunFolder


def _short(text: str, limit: int = 240) -> str:
    """A cause on one line (torch's messages run to paragraphs)."""
    line = " ".join(text.split("\n")[0].split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class EvalError(ValueError):
    """Bad input to `eval`: the file (or folder) and what is wrong with it."""

    def __init__(self, path, what: str):
        self.path, self.what = str(path), what
        super().__init__(f"{self.path}: {what}")


# ---- the checkpoint ---------------------------------------------------------------------

def resolve(arg: str | Path) -> Path:
    """A checkpoint file, or a run folder's checkpoints/best.pt, else its latest."""
    from w3async.learn.checkpoint import BEST_PT, POINTER  # noqa: PLC0415 (torch: not for the CLI's --help)

    p = Path(arg)
    if p.is_file():
        return p
    if not p.exists():
        raise EvalError(p, "no such file or folder")
    for ck in (RunFolder(p).checkpoints, p):  # a run folder, or its checkpoints/ folder
        if (ck / BEST_PT).is_file():
            return ck / BEST_PT
        if (ck / POINTER).is_file():
            name = (ck / POINTER).read_text().strip()
            if name and "/" not in name:
                return ck / name
    raise EvalError(p, f"a folder with no checkpoint (checkpoints/{BEST_PT} or checkpoints/{POINTER})")


def _no_nones(d):
    """A saved recipe as TOML would have it: a None (a key left at its default of None,
    e.g. learner.target_kl) is a key not written, which loads as that default."""
    if isinstance(d, dict):
        return {k: _no_nones(v) for k, v in d.items() if v is not None}
    if isinstance(d, list):
        return [_no_nones(v) for v in d]
    return d


def load_policy(path: Path, recipe_path: str | None = None):
    """(the recipe, the network with the checkpoint's weights, its policy version)."""
    import torch  # noqa: PLC0415

    from w3async.learn.checkpoint import CheckpointLoadError, foreign, load_checkpoint  # noqa: PLC0415
    from w3async.learn.network import Network  # noqa: PLC0415
    from w3async.recipes import RecipeError, load_recipe, recipe_from_dict, resolve_recipe_path  # noqa: PLC0415

    try:
        ckpt = load_checkpoint(path)
    except CheckpointLoadError as e:
        raise EvalError(path, _short(e.cause)) from e
    folder = Path(path).resolve().parent.parent  # a run folder's checkpoints/<file>
    why = foreign(ckpt, folder) if Path(path).resolve().parent.name == "checkpoints" else None
    if why:
        raise EvalError(path, f"{why}; copy it out of the folder to evaluate it as a file of its own")
    try:
        if recipe_path:
            recipe = load_recipe(resolve_recipe_path(recipe_path))
        else:
            saved = _no_nones({k: v for k, v in (ckpt.get("recipe") or {}).items() if k != "path"})
            if not saved:
                raise EvalError(path, "the checkpoint holds no recipe: name one with --recipe")
            recipe = recipe_from_dict(saved, f"{path} (its recipe)")
    except RecipeError as e:
        raise EvalError(path, f"its recipe does not load: {e}") from e
    learner = ckpt["learner"]
    sd = learner.get("net") if isinstance(learner, dict) else None
    if not isinstance(sd, dict):
        raise EvalError(path, "the checkpoint holds no network weights (learner.net)")
    torch.manual_seed(recipe.inference.seed)
    net = Network(games.get(recipe.game).spec, recipe.network)
    try:
        net.load_state_dict(sd)
    except Exception as e:  # noqa: BLE001 (size mismatches, missing or unexpected keys)
        first = _short(describe(e))
        n = recipe.network
        raise EvalError(path, f"a checkpoint of another network: its weights do not fit the network of "
                              f"{'--recipe ' + recipe_path if recipe_path else 'its recipe'} (game {recipe.game}, "
                              f"d_model={n.d_model}, n_layers={n.n_layers}): {first}") from e
    return recipe, net, int(learner.get("version", 0))


def against(recipe, path_b: Path, recipe_path: str | None) -> tuple[tuple, list[str]]:
    """--against: B's (network, version) and the one level, "vs:<B's path>"; EvalError when
    B's network is not A's recipe's or the recipe has no group with two sides."""
    if not any(g.sides == 2 for g in recipe.games):
        raise EvalError(recipe.path, "--against needs a game group with two sides (sides = 2) in the recipe")
    rb, net_b, version_b = load_policy(path_b, recipe_path)
    if (rb.game, rb.network) != (recipe.game, recipe.network):
        raise EvalError(path_b, f"--against: its game and network ({rb.game}, {rb.network}) are not the first "
                                f"checkpoint's ({recipe.game}, {recipe.network})")
    return (net_b, version_b), [f"vs:{path_b}"]


# ---- a model of the user's own (--policy) -------------------------------------------------

def load_own_policy(source: str, model: Path, recipe_path: str | None):
    """--policy SOURCE:FUNCTION: (the recipe, FUNCTION(model, spec)) where SOURCE is a .py
    file or a module and FUNCTION returns the policy: a callable from a batch of
    observations (the env's: glob, ent, ent_type, n_ent, mask, n rows each) to (n, heads)
    actions. The games and levels are --recipe's (a model of one's own carries none)."""
    import importlib  # noqa: PLC0415
    import importlib.util  # noqa: PLC0415

    from w3async.recipes import RecipeError, load_recipe, resolve_recipe_path  # noqa: PLC0415

    where, _, func = source.rpartition(":")
    if not where or not func.isidentifier():
        raise EvalError(source, "--policy must be FILE.py:FUNCTION or package.module:FUNCTION")
    if not recipe_path:
        raise EvalError(model, "--policy plays a model of your own: name the games and levels with --recipe")
    if not Path(model).exists():
        raise EvalError(model, "no such file or folder")
    try:
        recipe = load_recipe(resolve_recipe_path(recipe_path))
    except RecipeError as e:
        raise EvalError(recipe_path, f"--recipe does not load: {e}") from e
    try:
        if where.endswith(".py"):
            spec = importlib.util.spec_from_file_location(f"w3async_eval_policy_{Path(where).stem}", where)
            if spec is None or not Path(where).is_file():
                raise FileNotFoundError(f"no such file {where!r}")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
        else:
            mod = importlib.import_module(where)
        make = getattr(mod, func)
    except Exception as e:  # noqa: BLE001 (whatever the user's module raises on import)
        raise EvalError(source, f"--policy: cannot load it: {_short(describe(e))}") from e
    try:
        policy = make(str(model), games.get(recipe.game).spec)
    except Exception as e:  # noqa: BLE001 (the user's loader: a wrong file, weights of another model)
        raise EvalError(model, f"--policy {func}() could not load it: {_short(describe(e))}") from e
    if not callable(policy):
        raise EvalError(source, f"--policy {func}() returned {type(policy).__name__}, not a callable policy")
    return recipe, policy
