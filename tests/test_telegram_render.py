"""Answers rendered for Telegram: valid MarkdownV2 whatever the LLM wrote, and parts that
fit Telegram's 4096-unit limit.

``parse_markdown_v2`` below is a checker of Telegram's MarkdownV2 rules written from its
parser (tdlib's ``parse_markdown_v2``), independent of the renderer: it raises where
Telegram would answer "Can't parse entities", and returns the visible text and entities.
It is stricter than Telegram in two ways the renderer never needs: entities may not nest,
and ``>`` / ``!`` (block quotes, custom emoji) are refused.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from amelio.telegram.render import (
    MAX_MESSAGE_CHARS,
    escape,
    footnotes_block,
    render_parts,
    split_message,
    to_markdown_v2,
    visible_length,
)

RESERVED = frozenset("_*[]()~`>#+-=|{}.!")
Entity = tuple[str, str, str]  # (type, visible text, argument: a language or a URL)


class Rejected(AssertionError):
    """Telegram would refuse the message."""


def parse_markdown_v2(md: str) -> tuple[str, list[Entity]]:
    """The visible text and the entities of ``md``, as Telegram's parser reads it."""
    out: list[str] = []
    stack: list[tuple[str, int, str]] = []  # (type, where its text starts in out, argument)
    entities: list[Entity] = []
    i, n = 0, len(md)
    while i < n:
        c = md[i]
        nxt = md[i + 1] if i + 1 < n else ""
        if c == "\\" and nxt and 0 < ord(nxt) <= 126:  # an escape, inside entities too
            out.append(nxt)
            i += 2
            continue
        top = stack[-1][0] if stack else ""
        special = c == "`" if top in ("code", "pre") else c in RESERVED
        if not special:
            out.append(c)
            i += 1
            continue
        closes = {
            "bold": c == "*",
            "italic": c == "_" and nxt != "_",
            "underline": md.startswith("__", i),
            "strike": c == "~",
            "spoiler": md.startswith("||", i),
            "code": c == "`",
            "pre": md.startswith("```", i),
            "link": c == "]",
        }.get(top, False)
        if closes:
            kind, start, argument = stack.pop()
            i += {"underline": 2, "spoiler": 2, "pre": 3}.get(kind, 1)
            if kind == "link":
                if not md.startswith("(", i):
                    raise Rejected(f"link without a URL at {i}")
                i += 1
                url: list[str] = []
                while i < n and md[i] != ")":
                    if md[i] == "\\" and i + 1 < n and 0 < ord(md[i + 1]) <= 126:
                        url.append(md[i + 1])
                        i += 2
                    else:
                        url.append(md[i])
                        i += 1
                if i >= n:
                    raise Rejected("Can't find end of a URL")
                i += 1
                argument = "".join(url)
            entities.append((kind, "".join(out[start:]), argument))
            continue
        if stack:
            raise Rejected(f"{c!r} opens an entity inside {top} at {i}")
        argument = ""
        if c == "*":
            kind, i = "bold", i + 1
        elif c == "_":
            kind, i = ("underline", i + 2) if nxt == "_" else ("italic", i + 1)
        elif c == "~":
            kind, i = "strike", i + 1
        elif c == "|" and nxt == "|":
            kind, i = "spoiler", i + 2
        elif c == "[":
            kind, i = "link", i + 1
        elif md.startswith("```", i):
            kind, i = "pre", i + 3
            end = i
            while end < n and not md[end].isspace() and md[end] != "`":
                end += 1
            if end != i and end < n and md[end] != "`":
                argument, i = md[i:end], end
            if i < n and md[i] == "\n":
                i += 1
        elif c == "`":
            kind, i = "code", i + 1
        else:
            raise Rejected(f"Character {c!r} is reserved and must be escaped (at {i})")
        stack.append((kind, len(out), argument))
    if stack:
        raise Rejected(f"Can't find end of {stack[-1][0]} entity")
    return "".join(out), entities


def shown(md: str) -> str:
    return parse_markdown_v2(md)[0]


def u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def solid(text: str) -> str:
    return "".join(c for c in text if not c.isspace())


def is_subsequence(small: str, big: str) -> bool:
    chars = iter(big)
    return all(c in chars for c in small)


def fence_lines(part: str) -> list[str]:
    return [line for line in part.split("\n") if line.lstrip().startswith("```")]


# -- the checker itself ----------------------------------------------------------------------


@pytest.mark.parametrize("md", ["a.b", "*open", "`open", "[a](https://x.io", "_a__b_", "a > b"])
def test_checker_refuses_what_telegram_refuses(md: str) -> None:
    with pytest.raises(Rejected):
        parse_markdown_v2(md)


# -- rendering ---------------------------------------------------------------------------------


def test_reserved_characters_are_escaped() -> None:
    md = to_markdown_v2("Done. It works! (1+1=2) #tag {x} a|b ~c")
    assert md == r"Done\. It works\! \(1\+1\=2\) \#tag \{x\} a\|b \~c"
    assert shown(md) == "Done. It works! (1+1=2) #tag {x} a|b ~c"


def test_escape_shows_every_character_as_written() -> None:
    text = r"skill_name *v2* [draft](x) `tick` \back > 1.0! -=|{}#+~"
    assert shown(escape(text)) == text
    assert parse_markdown_v2(escape(text))[1] == []


def test_code_block_keeps_backticks_and_backslashes() -> None:
    source = '```python\nprint("`tick`", "a\\\\b", "```")\npath = "C:\\\\tmp\\\\"\n```'
    md = to_markdown_v2(source)
    assert md.startswith("```python\n") and md.endswith("\n```")
    code = 'print("`tick`", "a\\\\b", "```")\npath = "C:\\\\tmp\\\\"\n'
    assert parse_markdown_v2(md) == (code, [("pre", code, "python")])


def test_inline_code_keeps_backslashes_and_backticks() -> None:
    md = to_markdown_v2(r"Use `\` or ``a`b`` and `rm -rf /tmp/x.y`.")
    text, entities = parse_markdown_v2(md)
    assert text == r"Use \ or a`b and rm -rf /tmp/x.y."
    assert [e[1] for e in entities] == ["\\", "a`b", "rm -rf /tmp/x.y"]


def test_markdown_constructs() -> None:
    source = "# Deploy *now*\nRun **the build** then *check* _it_.\n- first\n* second\n1. third"
    text, entities = parse_markdown_v2(to_markdown_v2(source))
    assert text == "Deploy now\nRun the build then check it.\n• first\n• second\n1. third"
    assert entities == [
        ("bold", "Deploy now", ""),
        ("bold", "the build", ""),
        ("italic", "check", ""),
        ("italic", "it", ""),
    ]


def test_unclosed_fence_is_plain_text() -> None:
    source = "Here:\n```python\nprint(1) # x.y"
    md = to_markdown_v2(source)
    assert parse_markdown_v2(md) == (source, [])


def test_empty_code_is_plain_text() -> None:
    assert parse_markdown_v2(to_markdown_v2("```\n  \n```")) == ("```\n  \n```", [])
    assert parse_markdown_v2(to_markdown_v2("a ` ` b")) == ("a ` ` b", [])


@pytest.mark.parametrize(
    ("source", "text", "entities"),
    [
        ("**bold", "**bold", []),
        ("a ** b ** c", "a ** b ** c", []),
        ("***", "***", []),
        ("**a *b* c**", "a b c", [("bold", "a b c", "")]),
        ("*a **b* c**", "a **b c**", [("italic", "a **b", "")]),
        ("***both***", "both", [("bold", "both", "")]),
        ("2*3*4 and snake_case_name and __init__", "2*3*4 and snake_case_name and __init__", []),
        ("*a*_b_", "ab", [("italic", "a", "")]),  # "_a__b_" would open an underline
        ("**a**, **b.**", "a, b.", [("bold", "a", ""), ("bold", "b.", "")]),
        ("**a****b**", "a****b", [("bold", "a****b", "")]),  # a run of four is literal
    ],
)
def test_stars_and_underscores(source: str, text: str, entities: list[Entity]) -> None:
    assert parse_markdown_v2(to_markdown_v2(source)) == (text, entities)


def test_link_with_a_parenthesis_in_the_url() -> None:
    md = to_markdown_v2("See [Foo](https://en.wikipedia.org/wiki/Foo_(bar)).")
    assert parse_markdown_v2(md) == (
        "See Foo.",
        [("link", "Foo", "https://en.wikipedia.org/wiki/Foo_(bar)")],
    )


@pytest.mark.parametrize(
    "url", ["javascript:alert(1)", "tg://user?id=1", "/docs/a.md", "ftp://x.io"]
)
def test_non_http_link_is_plain_text(url: str) -> None:
    source = f"Open [**this**]({url}) now."
    assert parse_markdown_v2(to_markdown_v2(source)) == (source, [])


def test_emoji_count_two_units() -> None:
    assert visible_length(to_markdown_v2("😀")) == 2
    assert visible_length(to_markdown_v2("é😀.")) == 4
    parts = split_message("😀" * 10, limit=5)
    assert parts == ["😀😀"] * 5  # three would be six units


def test_visible_length_strips_markup() -> None:
    md = "*b\\.*\n```py\nx = \\`1\\`\n```\n[t](https://x.io/\\))\\\\ `c\\`d`"
    assert shown(md) == "b.\nx = `1`\n\nt\\ c`d"
    assert visible_length(md) == u16(shown(md)) == 18


def test_footnotes_block() -> None:
    assert footnotes_block([]) == ""
    assert footnotes_block(["", "  \n "]) == ""
    block = footnotes_block(["Grounded in 2 sources.", "Eval: 0.9 (pass)\nsee *notes*"])
    text, entities = parse_markdown_v2(block)
    assert text == "Grounded in 2 sources.\nEval: 0.9 (pass)\nsee *notes*"
    assert [kind for kind, _, _ in entities] == ["italic"] * 3
    answer = f"{to_markdown_v2('The answer.')}\n\n{block}"
    assert shown(answer).startswith("The answer.\n\nGrounded")


# -- splitting ---------------------------------------------------------------------------------


def _answer_with_big_code_block() -> tuple[str, str]:
    prose = " ".join(f"Sentence {i} explains step {i}. It is simple!" for i in range(46))
    line = "    total_{0:03d} = compute(`x`, {0}) * 2  # step {0}\\n"
    code = "\n".join(line.format(i) for i in range(120))
    answer = f"# Plan\n\n{prose}\n\n```python\n{code}\n```\n\nThat's **all**.\n\n{prose}"
    return answer, code


def test_long_answer_with_a_big_code_block() -> None:
    answer, code = _answer_with_big_code_block()
    assert 9_500 <= len(answer) <= 10_500 and 5_500 <= len(code) <= 6_500
    parts = split_message(answer)
    rendered = render_parts(answer)
    assert len(parts) == len(rendered) >= 3
    assert rendered == [to_markdown_v2(p) for p in parts]
    for part, md in zip(parts, rendered, strict=True):
        text, entities = parse_markdown_v2(md)  # balanced, or this raises
        assert visible_length(md) == u16(text) <= MAX_MESSAGE_CHARS
        fences = fence_lines(part)
        assert len(fences) % 2 == 0
        assert all(f == "```python" for f in fences[::2]) and all(f == "```" for f in fences[1::2])
        assert sum(kind == "pre" for kind, _, _ in entities) == len(fences) // 2
    code_parts = [p for p in parts if "```python" in p]
    assert len(code_parts) >= 2  # the block did not fit one message: cut and reopened
    assert is_subsequence(solid(answer), solid("".join(parts)))
    assert all(sum(line in p.split("\n") for p in parts) == 1 for line in code.split("\n"))


def test_prefers_blocks_then_lines_then_words() -> None:
    first, second = "A" * 30 + " " + "b" * 10, "c" * 30
    assert split_message(f"{first}\n\n{second}", limit=50) == [first, second]
    lines = ["x" * 20, "y" * 20, "z" * 20]
    assert split_message("\n".join(lines), limit=45) == ["\n".join(lines[:2]), lines[2]]
    assert split_message("one two three four", limit=9) == ["one two", "three", "four"]
    assert split_message("abcdefghij", limit=4) == ["abcd", "efgh", "ij"]


def test_cut_code_block_is_closed_and_reopened() -> None:
    source = "```sql\n" + "\n".join(f"SELECT {i} FROM t;" for i in range(40)) + "\n```"
    parts = split_message(source, limit=100)
    assert len(parts) > 1
    for part in parts:
        assert part.startswith("```sql\n") and part.endswith("\n```")
        assert visible_length(to_markdown_v2(part)) <= 100
    assert "".join(p[len("```sql\n") : -len("\n```")] + "\n" for p in parts) == source[7:-3]


def test_code_line_longer_than_a_message() -> None:
    line = "x" * 500
    parts = split_message(f"```\n{line}\n```", limit=100)
    assert all(p.startswith("```\n") and p.endswith("\n```") for p in parts)
    assert "".join(shown(to_markdown_v2(p)).strip() for p in parts) == line


def test_blank_and_bad_limits() -> None:
    assert split_message("") == [] and render_parts(" \n\n\t") == []
    assert split_message("short.") == ["short."]
    for limit in (2, MAX_MESSAGE_CHARS + 1):
        with pytest.raises(ValueError, match="limit"):
            split_message("x", limit=limit)


# -- properties ---------------------------------------------------------------------------------

TOKENS = [
    "a",
    "b",
    "word",
    " ",
    " ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    "*",
    "**",
    "_",
    "__",
    "`",
    "```",
    "```py\n",
    "\n```\n",
    "    ```\n",
    "[",
    "]",
    "(",
    ")",
    "[t](https://x.io/a_(b))",
    "[t](ftp://x)",
    "# ",
    "- ",
    "* ",
    "\\",
    ".",
    "!",
    "-",
    "#",
    ">",
    "|",
    "~",
    "{",
    "}",
    "=",
    "+",
    "😀",
    "é",
    "\u200d",
    "---",
]
markdown = st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)
texts = st.one_of(markdown, st.text(max_size=60))


@settings(max_examples=300, deadline=None)
@given(texts)
def test_any_text_renders_to_valid_markdown_v2(text: str) -> None:
    md = to_markdown_v2(text)
    visible, _ = parse_markdown_v2(md)
    assert visible_length(md) == u16(visible) <= u16(text)  # never longer than the source


@settings(max_examples=150, deadline=None)
@given(texts, st.integers(3, 300))
def test_split_parts_fit_and_lose_nothing(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    for part in parts:
        assert part.strip()
        md = to_markdown_v2(part)
        parse_markdown_v2(md)
        assert visible_length(md) <= limit
    assert is_subsequence(solid(text), solid("".join(parts)))


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=80))
def test_escape_round_trips(text: str) -> None:
    assert shown(escape(text)) == re.sub(r"\r\n?", "\n", text)
