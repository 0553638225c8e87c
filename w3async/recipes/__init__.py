"""Recipes: a run's TOML file, typed and checked before anything starts.

    recipe = load_recipe(resolve_recipe_path("fgself"), ["stop.minutes=5"])  # RecipeError: every problem
    recipe.supervisor.backoff_s, recipe.games[0].lanes, ...

load.py is the one way in (the TOML, `--set`, a file's relative paths, a game's own
[spec]); sections.py the runtime sections' schema, learning.py the learning ones (no
torch), spec.py a declared game's [spec], checks.py the types, bounds and messages they
share. What needs the machine is checked by runtime/preflight.py."""

from w3async.recipes.checks import MAX_ROWS, YEAR_S, system_folder
from w3async.recipes.load import (
    RecipeError,
    from_recipe_folder,
    load_recipe,
    recipe_from_dict,
    recipe_to_dict,
    resolve_recipe_path,
)
from w3async.recipes.sections import REPO_ROOT, GameGroup, InjectSection, Recipe

__all__ = ["MAX_ROWS", "REPO_ROOT", "YEAR_S", "GameGroup", "InjectSection", "Recipe", "RecipeError",
           "from_recipe_folder", "load_recipe", "recipe_from_dict", "recipe_to_dict", "resolve_recipe_path",
           "system_folder"]
