"""Every relative link and image in README.md and docs/ names a file that exists, and every
#anchor a heading of that page: docs move (docs/experiments/, its figures/) and
get reordered (performance.md by component), and neither may leave a dead link."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# [text](target) and ![alt](target), an optional "title" after the target; <img src="...">
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMG_SRC = re.compile(r"<img\s[^>]*src=\"([^\"]+)\"")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
CODE_SPAN = re.compile(r"`[^`\n]*`")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def relative_targets(text: str) -> list[str]:
    """The relative link and image targets of a markdown text, code left out."""
    text = CODE_SPAN.sub("", FENCE.sub("", text))
    found = LINK.findall(text) + IMG_SRC.findall(text)
    return [t for t in found if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


def anchors(md: Path) -> set[str]:
    """The #anchors a markdown page's headings get, as GitHub makes them: lower case,
    punctuation dropped, spaces to hyphens, a repeated one suffixed -1, -2, ..."""
    seen: dict[str, int] = {}
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", FENCE.sub("", md.read_text(encoding="utf-8")), re.M):
        slug = re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            slug = f"{slug}-{n}"
        seen.setdefault(slug, 1)
    return set(seen)


def broken_links(md: Path, root: Path = ROOT) -> list[str]:
    """'file: target' for each relative target of md that names no file or folder, or an
    #anchor that no heading of its page makes."""
    bad = []
    for target in relative_targets(md.read_text(encoding="utf-8")):
        path, _, anchor = target.partition("#")
        page = md.parent / path.split("?", 1)[0] if path else md
        if not page.exists():
            bad.append(f"{md.relative_to(root)}: {target}")
        elif anchor and page.suffix == ".md" and anchor not in anchors(page):
            bad.append(f"{md.relative_to(root)}: {target} (no such heading)")
    return bad


def test_every_relative_link_and_image_in_the_docs_resolves():
    files = markdown_files()
    targets = sum(len(relative_targets(f.read_text(encoding="utf-8"))) for f in files)
    assert targets >= 40, f"only {targets} relative links found in {len(files)} files: the scan is broken"
    bad = [b for f in files for b in broken_links(f)]
    assert not bad, "broken relative links (fix the path, or the file moved):\n" + "\n".join(bad)


def test_the_checker_finds_a_broken_link_and_ignores_code_and_urls(tmp_path):
    md = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Part\n\n## The part (two)\n")
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "a.svg").write_text("<svg/>")
    md.write_text(
        "# Top\n[ok](there.md#part) ![fig](figures/a.svg) [web](https://example.invalid/x) [anchor](#top)\n"
        "[gone](missing.md) ![gone too](figures/b.svg \"title\") <img src=\"figures/c.png\">\n"
        "[heading](there.md#the-part-two) [no heading](there.md#nowhere) [none here](#bottom)\n"
        "`[code](not-checked.md)`\n```\n[fenced](not-checked-either.md)\n```\n")
    assert relative_targets(md.read_text()) == [
        "there.md#part", "figures/a.svg", "#top", "missing.md", "figures/b.svg",
        "there.md#the-part-two", "there.md#nowhere", "#bottom", "figures/c.png"]
    assert broken_links(md, tmp_path) == [
        "page.md: missing.md", "page.md: figures/b.svg", "page.md: there.md#nowhere (no such heading)",
        "page.md: #bottom (no such heading)", "page.md: figures/c.png"]


def test_the_readmes_layout_names_every_module_and_c_file():
    """README.md's Layout names every module of the package and every C file of the shim
    and csrc/: a newcomer finds each file's role there (33 of them were missing)."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = text[text.index("## Layout"):text.index("## Recipes")]
    files = [p for p in (ROOT / "w3async").rglob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    files += [p for d in ("shim", "shim/inject", "csrc") for p in (ROOT / d).glob("*.[ch]")]
    named = set(re.findall(r"`(?:[\w./-]*/)?([\w.-]+\.(?:py|c|h))`", layout))  # `x.py` or `dir/x.py`
    missing = sorted(str(p.relative_to(ROOT)) for p in files if p.name not in named)
    assert not missing, missing


def test_no_issue_tags_in_code():
    """Comments say why, not which issue found it: no "issue 12" in the package, the C
    sides, the benchmarks, the examples or the tests."""
    tag = re.compile(r"\bissue \d+|\(issue\b", re.I)
    roots = ("w3async", "shim", "games", "csrc", "bench", "examples", "tests")
    found = [f"{p.relative_to(ROOT)}:{n}" for r in roots for p in (ROOT / r).rglob("*")
             if p.suffix in (".py", ".c", ".h") and p.name != "test_docs_links.py"
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if tag.search(line)]
    assert not found, found
