"""The lexer of DataSHIELD-style call text: the tokens the parser reads and the characters it refuses.

It sits below both :mod:`dsfed_core.calltree` (which reads the variable names in a formula's
text) and :mod:`dsfed_core.parser` (which builds the tree from the tokens).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsfed_core.errors import CallError

_NAME = re.compile(r"(?:[A-Za-z]|\.(?![0-9]))[A-Za-z0-9._]*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?L?")
_PUNCT = {"(", ")", ",", "$", "~", "+", "-", "*", ":", "="}
_RESERVED = {"function", "if", "else", "for", "while", "repeat", "break", "next", "return", "Inf", "NaN"}
_NO_ARITHMETIC = ("'/' and '^' are only read in an expression: in a model formula inside I() (y ~ I(age^2)), or "
                  "in deriveDS and an assign text (D$age^2); a formula's terms are variables, factor(), I() and "
                  "log() joined by +, -, * and :")
_COMPARISON = ("comparison operators are not allowed here (only in an expression of deriveDS or an assign "
               "text); pass the operator as a string argument")
_LOGICAL = "logical operators are not allowed here (only in an expression of deriveDS or an assign text)"
_FORBIDDEN = [
    ("<<-", "assignment is not allowed; use the assign endpoint with a symbol name"),
    ("->>", "assignment is not allowed"),
    ("<-", "assignment is not allowed; use the assign endpoint with a symbol name"),
    ("->", "assignment is not allowed"),
    ("::", "namespace access (::) is not allowed; call registered functions by name"),
    ("[", "indexing with [ ] is not allowed"),
    ("]", "indexing with [ ] is not allowed"),
    ("`", "backtick-quoted names are not allowed"),
    ("{", "braces are not allowed"),
    ("}", "braces are not allowed"),
    (";", "only one call per request is allowed (no ';')"),
    ("%", "%-operators are not allowed"),
    ("&&", "'&&' and '||' are not allowed; use '&' and '|'"),
    ("||", "'&&' and '||' are not allowed; use '&' and '|'"),
    ("@", "slot access (@) is not allowed"),
    ("?", "help (?) is not allowed"),
    ("\\", "lambda functions are not allowed"),
]
# operators read only inside an arithmetic expression (deriveDS, an assign text as ds.make sends it, a
# formula's I()); anywhere else the parser refuses them with the reason given here
_OPERATORS = [
    ("==", _COMPARISON), ("!=", _COMPARISON), ("<=", _COMPARISON), (">=", _COMPARISON),
    ("<", _COMPARISON), (">", _COMPARISON), ("!", _LOGICAL), ("&", _LOGICAL), ("|", _LOGICAL),
    ("/", _NO_ARITHMETIC), ("^", _NO_ARITHMETIC),
]


@dataclass(frozen=True)
class Token:
    kind: str  # NAME, NUMBER, STRING, PUNCT, END
    text: str
    pos: int
    value: object = None


def syntax_error(text: str, pos: int, message: str, rule: str | None = None) -> CallError:
    shown = text if len(text) <= 60 else text[:57] + "..."
    return CallError(f"cannot parse {shown!r} at character {pos + 1}: {message}", rule=rule)


def tokenize(text: str) -> list[Token]:
    tokens: list[Token] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in " \t\r\n":
            i += 1
            continue
        if ch in "\"'":
            j, chars = i + 1, []
            while j < len(text) and text[j] != ch:
                if text[j] == "\\" and j + 1 < len(text):
                    esc = text[j + 1]
                    if esc not in "\"'\\nt":
                        raise syntax_error(text, j, f"escape \\{esc} is not allowed in strings")
                    chars.append({"n": "\n", "t": "\t"}.get(esc, esc))
                    j += 2
                    continue
                chars.append(text[j])
                j += 1
            if j >= len(text):
                raise syntax_error(text, i, "unterminated string")
            value = "".join(chars)
            tokens.append(Token("STRING", text[i : j + 1], i, value))
            i = j + 1
            continue
        number = _NUMBER.match(text, i)
        if number and (ch.isdigit() or ch == "."):
            raw = number.group(0)
            body = raw.rstrip("L")
            # whole numbers of up to 18 digits exactly; anything longer as a float (possibly inf),
            # which the parameter's bound refuses by name (calltree.check_number)
            value: object = int(body) if re.fullmatch(r"\d{1,18}", body) else float(body)
            if raw.endswith("L") and isinstance(value, float) and value.is_integer():
                value = int(value)
            tokens.append(Token("NUMBER", raw, i, value))
            i = number.end()
            continue
        name = _NAME.match(text, i)
        if name:
            word = name.group(0)
            if word in _RESERVED:
                raise syntax_error(text, i, f"'{word}' is not allowed")
            tokens.append(Token("NAME", word, i))
            i = name.end()
            continue
        for op, why in _FORBIDDEN:
            if text.startswith(op, i):
                raise syntax_error(text, i, why)
        operator = next(((op, why) for op, why in _OPERATORS if text.startswith(op, i)), None)
        if operator is not None:
            tokens.append(Token("OP", operator[0], i, operator[1]))
            i += len(operator[0])
            continue
        if ch in _PUNCT:
            tokens.append(Token("PUNCT", ch, i))
            i += 1
            continue
        raise syntax_error(text, i, f"character {ch!r} is not allowed")
    tokens.append(Token("END", "", len(text)))
    return tokens
