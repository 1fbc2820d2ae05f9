"""Assistant answers as Telegram messages that Telegram always accepts.

The LLM writes ordinary Markdown, and Telegram's MarkdownV2 parser rejects a whole message
over a single unescaped ``.``, ``!`` or ``-`` ("Character '.' is reserved and must be
escaped"), so an answer sent as written would often not arrive at all. Here the Markdown
an LLM actually uses (paragraphs, ``**bold**``, ``*italic*``, inline code, fenced code
blocks, headings, bullets, links) becomes MarkdownV2, and everything else is escaped with
python-telegram-bot's own :func:`telegram.helpers.escape_markdown`, so the escaping rules
are the library's rather than a copy of them. A construct that is not well formed (an
unclosed fence, an unpaired ``**``, a ``javascript:`` link) falls back to escaped plain
text: a message that shows a stray asterisk beats one that fails to send. HTML would have
worked as well; MarkdownV2 is what python-telegram-bot's helpers escape.

Telegram also refuses a message over 4096 characters of *visible* text, counted in UTF-16
code units after the markup is parsed away, so :func:`split_message` cuts long answers on
the source Markdown (between blocks, then lines, then words, then anywhere), closes and
reopens a code block it has to cut, and renders every part to check it fits.

python-telegram-bot is imported on first use, not with this module: importing it costs
half a second, and the module must import where the ``telegram`` extra is not installed.
"""

from __future__ import annotations

import bisect
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "MAX_MESSAGE_CHARS",
    "escape",
    "footnotes_block",
    "render_parts",
    "split_message",
    "to_markdown_v2",
    "visible_length",
]

#: Telegram's limit on a message's text after entity parsing, in UTF-16 code units.
MAX_MESSAGE_CHARS = 4096
#: The smallest usable limit: a surrogate pair plus the newline that closes a code block.
_MIN_LIMIT = 3
#: A part is re-checked by rendering at most this often before settling for less text.
_MAX_TRIES = 32

_PUNCT = frozenset(string.punctuation)  # ASCII punctuation: what a Markdown backslash escapes
_TEXT_RUN = re.compile(r"[^\\`*_\[]+")
_BACKTICKS = re.compile(r"`+")
_WEB_URL = re.compile(
    r"https?://[A-Za-z0-9.\-\[\]:@%_~!$&'()*+,;=]+(?:[/?#][A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]*)?",
    re.IGNORECASE,
)
_FENCE_OPEN = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,})(?P<info>[^`]*)")
_FENCE_CLOSE = re.compile(r"[ \t]*(`{3,})[ \t]*")
_LANGUAGE = re.compile(r"[A-Za-z0-9_+#.\-]{1,32}")
_HEADING = re.compile(r"[ \t]{0,3}#{1,6}[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*")
_RULE = re.compile(r"[ \t]{0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*")
_BULLET = re.compile(r"([ \t]*)[-*+][ \t]+(\S.*)")
_SURROGATE = re.compile("[\ud800-\udfff]")
_WORD = re.compile(r"\S+")
_VISIBLE_OUTSIDE = re.compile(r"[^\\`*_~|\[\]!>]+")
_VISIBLE_INSIDE = re.compile(r"[^\\`]+")

# Boundary strengths: where a part may end, best first.
_BLOCK, _LINE, _WORD_GAP, _HARD = 3, 2, 1, 0


def _esc(text: str, entity_type: str | None = None) -> str:
    """python-telegram-bot's escaping, imported here so that importing this module does not
    import the bot library (half a second, and an optional extra)."""
    from telegram.helpers import escape_markdown

    return escape_markdown(text, version=2, entity_type=entity_type)


def _clean(text: str) -> str:
    """One newline convention, since blocks are found line by line, and no lone surrogates:
    Telegram wants UTF-8, and a lone surrogate cannot be encoded as UTF-8 at all."""
    return _SURROGATE.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))


def _u16(text: str) -> int:
    """Length as Telegram counts it: UTF-16 code units (an emoji outside the BMP is two)."""
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def escape(text: str) -> str:
    """Plain text for a MarkdownV2 message (skill names, learnings, errors): every character
    shows as written, none is read as markup."""
    return _esc(_clean(text))


def footnotes_block(footnotes: Sequence[str]) -> str:
    """The eval footnotes in italics, one per line, or ``""`` when there are none.

    The caller puts the block under the answer after a blank line (``f"{part}\\n\\n{block}"``),
    so that it can budget the separator and the block against the last part's limit.
    """
    lines = [line.strip() for note in footnotes for line in _clean(note).split("\n")]
    # One italic entity per line, so blank lines can be dropped without unbalancing one.
    return "\n".join(f"_{escape(line)}_" for line in lines if line)


# -- inline Markdown ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Tok:
    """One piece of a line: literal text, a code span, a link, or a run of ``*``/``_`` that
    may open or close emphasis once the whole line is known."""

    kind: Literal["lit", "code", "link", "delim"]
    value: str  # lit/delim: raw text; code: content; link: its text, already rendered flat
    url: str = ""
    can_open: bool = False
    can_close: bool = False


def _run_end(s: str, i: int) -> int:
    """Where the run of the character at ``s[i]`` ends."""
    j = i + 1
    while j < len(s) and s[j] == s[i]:
        j += 1
    return j


def _closing_backticks(s: str, start: int, width: int) -> int:
    """Where the next run of exactly ``width`` backticks starts, or -1 (CommonMark: a code
    span closes only on a run of the same length, and escapes do not apply inside it)."""
    for m in _BACKTICKS.finditer(s, start):
        if m.end() - m.start() == width:
            return m.start()
    return -1


def _link_at(s: str, i: int) -> tuple[str, str, int] | None:
    """``[text](url)`` starting at ``s[i] == "["``: its text, its URL and where it ends.

    Parentheses inside the URL must balance (Wikipedia's ``Foo_(bar)``), as CommonMark has
    it; whitespace ends the attempt, so prose in brackets stays prose.
    """
    j, n = i + 1, len(s)
    while j < n and s[j] != "]":
        if s[j] == "[":
            return None
        j += 2 if s[j] == "\\" else 1
    if j + 1 >= n or s[j] != "]" or s[j + 1] != "(":
        return None
    depth, k = 0, j + 2
    while k < n:
        c = s[k]
        if c.isspace():
            return None
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                return s[i + 1 : j], s[j + 2 : k], k + 1
            depth -= 1
        k += 1
    return None


def _tokenize(s: str) -> list[_Tok]:
    """The line's tokens. Code spans bind first and escapes do not apply inside them (so
    ``\\`` in backticks stays a backslash); emphasis is resolved afterwards, by
    :func:`_emit`, because whether a run opens depends on a closer further on."""
    toks: list[_Tok] = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            if i + 1 < n and s[i + 1] in _PUNCT:
                toks.append(_Tok("lit", s[i + 1]))
                i += 2
            else:
                toks.append(_Tok("lit", c))
                i += 1
        elif c == "`":
            j = _run_end(s, i)
            close = _closing_backticks(s, j, j - i)
            if close < 0:
                toks.append(_Tok("lit", s[i:j]))
                i = j
                continue
            content = s[j:close]
            if not content.strip():  # nothing to show in a code entity: keep the backticks
                toks.append(_Tok("lit", s[i : close + j - i]))
            else:
                if len(content) > 1 and content[0] == " " and content[-1] == " ":
                    content = content[1:-1]
                toks.append(_Tok("code", content))
            i = close + j - i
        elif c == "[":
            link = _link_at(s, i)
            if link is None:
                toks.append(_Tok("lit", c))
                i += 1
                continue
            text, url, end = link
            shown = _emit(_tokenize(text), flat=True)
            if _WEB_URL.fullmatch(url) and shown.strip():
                toks.append(_Tok("link", shown, url))
            else:  # tg://, javascript:, a relative path: the whole thing as written
                toks.append(_Tok("lit", s[i:end]))
            i = end
        elif c in "*_":
            j = _run_end(s, i)
            before = s[i - 1] if i else " "
            after = s[j] if j < n else " "
            width = j - i
            if c == "*" and width in (2, 3):  # **bold**, and ***bold italic*** shown bold
                opens, closes = not after.isspace(), not before.isspace()
            elif width == 1:  # *italic* / _italic_, never inside a word (snake_case, 2*3*4)
                opens = not after.isspace() and not before.isalnum()
                closes = not before.isspace() and not after.isalnum()
            else:  # __dunder__, ****: literal
                opens = closes = False
            toks.append(_Tok("delim", s[i:j], can_open=opens, can_close=closes))
            i = j
        else:
            m = _TEXT_RUN.match(s, i)
            end = m.end() if m else i + 1
            toks.append(_Tok("lit", s[i:end]))
            i = end
    return toks


def _emit(toks: Sequence[_Tok], *, flat: bool) -> str:
    """MarkdownV2 for the tokens. ``flat`` renders only the visible text (escaped), for
    places where Telegram entities would nest: inside bold, italics, headings, link text.

    An opening run pairs with the next closing run of the same kind; the first closer wins,
    so the same kind never nests and recursion is at most four levels deep.
    """
    closers: dict[str, list[int]] = {}
    for idx, tok in enumerate(toks):
        if tok.kind == "delim" and tok.can_close:
            closers.setdefault(tok.value, []).append(idx)
    out: list[str] = []
    italic_end = -1  # len(out) just after the last italic entity
    k = 0
    while k < len(toks):
        tok = toks[k]
        if tok.kind == "delim" and tok.can_open:
            found = closers.get(tok.value, [])
            at = bisect.bisect_right(found, k)
            if at < len(found):
                close = found[at]
                inner = _emit(toks[k + 1 : close], flat=True)
                if inner.strip():
                    if flat:
                        out.append(inner)
                    elif len(tok.value) > 1:
                        out.append(f"*{inner}*")
                    elif italic_end == len(out):
                        # "_a__b_" reads as underline to Telegram ("__" is greedy): the
                        # second of two touching italics goes plain instead.
                        out.append(inner)
                    else:
                        out.append(f"_{inner}_")
                        italic_end = len(out)
                    k = close + 1
                    continue
        if tok.kind == "code":
            out.append(_esc(tok.value) if flat else f"`{_esc(tok.value, 'code')}`")
        elif tok.kind == "link":
            out.append(tok.value if flat else f"[{tok.value}]({_esc(tok.url, 'text_link')})")
        else:
            out.append(_esc(tok.value))
        k += 1
    return "".join(out)


def _inline(s: str, *, flat: bool = False) -> str:
    return _emit(_tokenize(s), flat=flat)


def _render_line(line: str) -> str:
    """One line outside code blocks. Lines never share an entity, which is what lets
    :func:`split_message` cut between any two of them."""
    if not line.strip():
        return line
    m = _HEADING.fullmatch(line)
    if m:
        title = _inline(m.group(1), flat=True)  # Telegram has no headings: a bold line
        if title.strip():
            return f"*{title}*"
    if _RULE.fullmatch(line):
        return _esc(line)
    m = _BULLET.fullmatch(line)
    if m:
        return f"{m.group(1)}• {_inline(m.group(2))}"
    return _inline(line)


# -- blocks ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _CodeBlock:
    start: int  # the opening fence's line
    end: int  # the closing fence's line
    language: str
    indent: int  # the opening fence's indentation, removed from the content lines


def _code_blocks(lines: Sequence[str]) -> dict[int, _CodeBlock]:
    """The fenced code blocks, by first line. A fence with no closer, or around nothing
    but blank lines, is not a block: its lines stay text, escaped."""
    closers = [k for k, line in enumerate(lines) if _FENCE_CLOSE.fullmatch(line)]
    blocks: dict[int, _CodeBlock] = {}
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.fullmatch(lines[i])
        if m is None:
            i += 1
            continue
        width = len(m.group("fence"))
        end = -1
        for k in closers[bisect.bisect_right(closers, i) :]:
            if len(lines[k].strip()) >= width:
                end = k
                break
        if end < 0:
            i += 1
            continue
        if any(line.strip() for line in lines[i + 1 : end]):
            info = m.group("info").split()
            language = info[0] if info and _LANGUAGE.fullmatch(info[0]) else ""
            blocks[i] = _CodeBlock(i, end, language, len(m.group("indent")))
        i = end + 1
    return blocks


def _dedent(line: str, indent: int) -> str:
    stripped = line.lstrip(" \t")
    return line[min(indent, len(line) - len(stripped)) :]


def to_markdown_v2(text: str) -> str:
    """The answer as MarkdownV2 that Telegram's parser accepts, whatever the text.

    Visible text never grows (the visible length is at most the source's UTF-16 length),
    which is what lets :func:`split_message` fall back to cutting the source blindly.
    """
    lines = _clean(text).split("\n")
    blocks = _code_blocks(lines)
    out: list[str] = []
    i = 0
    while i < len(lines):
        block = blocks.get(i)
        if block is None:
            out.append(_render_line(lines[i]))
            i += 1
            continue
        code = "\n".join(_dedent(line, block.indent) for line in lines[i + 1 : block.end])
        out.append(f"```{block.language}\n{_esc(code, 'pre')}\n```")
        i = block.end + 1
    return "\n".join(out)


def visible_length(markdown_v2: str) -> int:
    """How long Telegram will find the message: the text left once escapes and entity
    delimiters (``*``, ``_``, ``~``, ``||``, backticks, a code block's language line, a
    link's URL) are parsed away, in UTF-16 code units. Meant for valid MarkdownV2."""
    s, n = markdown_v2, len(markdown_v2)
    units, i = 0, 0
    mode = ""  # "", "code" or "pre"
    line_start = True
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and 0 < ord(s[i + 1]) <= 126:
            units += 1
            line_start = s[i + 1] == "\n"
            i += 2
            continue
        if mode:
            if c == "`" and (mode == "code" or s.startswith("```", i)):
                i += 1 if mode == "code" else 3
                mode, line_start = "", False
                continue
            m = _VISIBLE_INSIDE.match(s, i)
            chunk = m.group() if m else c
            units += _u16(chunk)
            i += len(chunk)
            continue
        if s.startswith("```", i):
            i += 3
            j = i
            while j < n and not s[j].isspace() and s[j] != "`":
                j += 1
            if j < n and s[j] != "`":  # a language, read up to the first space
                i = j
            if i < n and s[i] in "\r\n":  # Telegram drops one newline after the fence
                i += 2 if i + 1 < n and s[i + 1] in "\r\n" and s[i] != s[i + 1] else 1
            mode = "pre"
            continue
        if c == "`":
            mode = "code"
            i += 1
            continue
        if c == "]" and s.startswith("(", i + 1):  # a link's URL shows nothing
            i += 2
            while i < n and s[i] != ")":
                i += 2 if s[i] == "\\" else 1
            i += 1
            continue
        if c in "*_~|[" or (c == "!" and s.startswith("[", i + 1)) or (c == ">" and line_start):
            i += 1
            continue
        m = _VISIBLE_OUTSIDE.match(s, i)
        chunk = m.group() if m else c
        units += _u16(chunk)
        line_start = chunk.endswith("\n")
        i += len(chunk)
    return units


# -- splitting ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fence:
    opener: str
    closer: str


@dataclass(frozen=True, slots=True)
class _Atom:
    """The smallest piece of source a part is made of: a line, or a word or a slice of a
    line too long for one message."""

    text: str
    fence: _Fence | None  # the code block the piece belongs to
    joiner: str  # the whitespace after it in the source
    strength: int  # how good a place to end a part right after it is
    cost: int  # its visible length (an upper bound for pieces of a line)


def _hard_pieces(text: str, budget: int) -> list[str]:
    """``text`` in slices of at most ``budget`` UTF-16 units, never inside a surrogate pair."""
    pieces: list[str] = []
    start, used = 0, 0
    for k, ch in enumerate(text):
        width = 2 if ord(ch) > 0xFFFF else 1
        if used + width > budget:
            pieces.append(text[start:k])
            start, used = k, 0
        used += width
    pieces.append(text[start:])
    return pieces


def _line_atoms(
    line: str, fence: _Fence | None, joiner: str, strength: int, budget: int
) -> list[_Atom]:
    """A line too long for one message, as words, and words too long as slices."""
    words = list(_WORD.finditer(line))
    if not words:
        spans = [(line, joiner, strength)]
    else:
        spans = []
        for k, m in enumerate(words):
            begin = 0 if k == 0 else m.start()
            last = k == len(words) - 1
            gap = line[m.end() :] + joiner if last else line[m.end() : words[k + 1].start()]
            spans.append((line[begin : m.end()], gap, strength if last else _WORD_GAP))
    atoms: list[_Atom] = []
    for text, gap, after in spans:
        pieces = _hard_pieces(text, budget)
        if fence is not None:
            # A piece that is only backticks would read as the block's closing fence once
            # it stands on a line of its own; two backticks at most cannot.
            pieces = [
                small
                for piece in pieces
                for small in (_hard_pieces(piece, 2) if _FENCE_CLOSE.fullmatch(piece) else [piece])
            ]
        for k, piece in enumerate(pieces):
            final = k == len(pieces) - 1
            atoms.append(
                _Atom(piece, fence, gap if final else "", after if final else _HARD, _u16(piece))
            )
    return atoms


def _atoms(text: str, limit: int) -> list[_Atom]:
    """The source as atoms, each of which fits a message on its own."""
    lines = text.split("\n")
    blocks = _code_blocks(lines)
    units: list[tuple[str, _Fence | None]] = []
    gaps: list[tuple[str, int]] = []  # gaps[k]: the joiner and strength before units[k + 1]
    blank: list[str] = []
    after_code = False
    i = 0
    while i < len(lines):
        block = blocks.get(i)
        if block is not None:
            fence = _Fence(lines[i], lines[block.end])
            for k in range(i + 1, block.end):
                if units:
                    first = k == i + 1
                    gaps.append(("\n".join(["", *blank, ""]), _BLOCK) if first else ("\n", _LINE))
                units.append((lines[k], fence))
            blank, after_code = [], True
            i = block.end + 1
            continue
        line = lines[i]
        i += 1
        if not line.strip():
            blank.append(line)
            continue
        if units:
            if blank or after_code:
                gaps.append(("\n".join(["", *blank, ""]), _BLOCK))
            else:
                gaps.append(("\n", _LINE))
        units.append((line, None))
        blank, after_code = [], False
    if not units:
        return []
    gaps.append(("", _BLOCK))

    atoms: list[_Atom] = []
    for (line, code), (joiner, strength) in zip(units, gaps, strict=True):
        if code is None:
            shown = _render_line(line)
            cost = visible_length(shown)
            if cost <= limit:
                atoms.append(_Atom(line, None, joiner, strength, cost))
                continue
            atoms.extend(_line_atoms(line, None, joiner, strength, limit))
        elif _u16(line) + 1 <= limit:  # a code block shows a newline before its closing fence
            atoms.append(_Atom(line, code, joiner, strength, _u16(line)))
        else:
            atoms.extend(_line_atoms(line, code, joiner, strength, limit - 1))
    return atoms


def _build(atoms: Sequence[_Atom]) -> str:
    """The source of one part: the atoms with their whitespace, each stretch of a code block
    inside its fences (reopened with the same language when the block was cut). A stretch
    of nothing but blank code lines is left out: a code entity of blanks shows nothing."""
    kept: list[_Atom] = []
    k = 0
    while k < len(atoms):
        j = k + 1
        fence = atoms[k].fence
        if fence is not None:
            while j < len(atoms) and atoms[j].fence is fence:
                j += 1
            if not any(atom.text.strip() for atom in atoms[k:j]):
                k = j
                continue
        kept.extend(atoms[k:j])
        k = j
    out: list[str] = []
    for k, atom in enumerate(kept):
        fence = atom.fence
        if fence is not None and (k == 0 or kept[k - 1].fence is not fence):
            out.append(fence.opener + "\n")
        out.append(atom.text)
        ends_stretch = k == len(kept) - 1 or kept[k + 1].fence is not fence
        if fence is not None and ends_stretch:
            out.append("\n" + fence.closer)
        if k < len(kept) - 1:
            out.append(atom.joiner)
    return "".join(out)


def _fits(part: str, limit: int) -> bool:
    return visible_length(to_markdown_v2(part)) <= limit


def _next_part(atoms: Sequence[_Atom], i: int, limit: int) -> tuple[int, str]:
    """Where the part starting at atom ``i`` ends, and its source.

    Of the ends whose estimated length fits, the last one at the strongest boundary
    (block, line, word, anywhere) wins; each guess is rendered to confirm it, since the
    estimate of a cut line is only an upper bound and a cut can change how a later line
    parses. A single atom always fits, by construction of the atoms.
    """
    ends: list[tuple[int, int]] = []  # (end, strength)
    total = 0
    for j in range(i, len(atoms)):
        atom = atoms[j]
        if j > i:
            total += _u16(atoms[j - 1].joiner)
        total += atom.cost
        if atom.fence is not None and (j == i or atoms[j - 1].fence is not atom.fence):
            total += 1  # the newline before the closing fence
        if total > limit and j > i:
            break
        ends.append((j + 1, atom.strength))
    tried: set[int] = set()
    for strength in (_BLOCK, _LINE, _WORD_GAP, _HARD):
        for end, after in reversed(ends):
            if after < strength or end in tried or len(tried) >= _MAX_TRIES:
                continue
            tried.add(end)
            part = _build(atoms[i:end])
            if _fits(part, limit):
                return end, part
    return i + 1, _build(atoms[i : i + 1])


def split_message(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """The answer's Markdown in parts that each render to at most ``limit`` visible UTF-16
    units, cut between blocks if possible, else between lines, else between words, else
    anywhere; a code block that has to be cut is closed and reopened with its language,
    so no part leaves a fence open. Parts are never blank, and only whitespace is lost
    between them. Splitting the source rather than the rendered text keeps every part
    well-formed MarkdownV2 on its own.
    """
    if not _MIN_LIMIT <= limit <= MAX_MESSAGE_CHARS:
        raise ValueError(f"limit must be between {_MIN_LIMIT} and {MAX_MESSAGE_CHARS}: {limit}")
    text = _clean(text)
    if not text.strip():
        return []
    if _fits(text, limit):
        return [text]
    atoms = _atoms(text, limit)
    parts: list[str] = []
    i = 0
    while i < len(atoms):
        i, part = _next_part(atoms, i, limit)
        if part.strip():
            parts.append(part)
    return parts


def render_parts(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """The answer as MarkdownV2 messages, each within ``limit`` visible UTF-16 units (see
    :func:`split_message`); none for a blank answer."""
    return [to_markdown_v2(part) for part in split_message(text, limit)]
