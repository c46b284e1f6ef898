"""A safe parser for DataSHIELD-style call text, e.g. ``meanDS(D$age)``.

The grammar is deliberately tiny; anything outside it is refused with a clear
error, and nothing is ever evaluated::

    expr     := call | NAME ('$' NAME)? | literal | 'c' '(' literals ')' | formula
    call     := NAME '(' [arg (',' arg)*] ')'
    arg      := [NAME '='] expr
    literal  := NUMBER | '-' NUMBER | STRING | TRUE | FALSE | NULL | NA   (NULL, NA: not given)
    formula  := [var] '~' rhs          (only where an argument is read as a formula)
    rhs      := term (('+' | '-') term)* ; term := var ((':' | '*') var)* | '0' | '1'
    var      := NAME | NAME '$' NAME

Operators (``+ - * : ~``) are accepted only inside a formula; a formula is only
accepted by a parameter typed as one (checked when arguments are bound).
Refused with a reason: backticks, indexing ``[ ]``, assignment ``<- = ->``,
braces, ``;``, ``::``, ``%op%``, comparison and logical operators, parentheses
used for grouping, control flow and ``function``. A string is at most
``strings.max_length`` long, unless it only lists numbers (``"0.1,-2,3e-4"``,
as DataSHIELD sends coefficient vectors); the whole call text is at most eight
times that.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dsfed_core.calltree import (
    Arg,
    Call,
    Column,
    Formula,
    FormulaTerm,
    Limits,
    Literal,
    Node,
    Symbol,
    Vector,
    check_limits,
    check_vector,
)
from dsfed_core.errors import CallError

_NAME = re.compile(r"(?:[A-Za-z]|\.(?![0-9]))[A-Za-z0-9._]*")
_NUMBER = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?L?")
_PUNCT = {"(", ")", ",", "$", "~", "+", "-", "*", ":", "="}
_RESERVED = {"function", "if", "else", "for", "while", "repeat", "break", "next", "return", "Inf", "NaN"}
_NO_ARITHMETIC = ("'/' and '^' are not allowed, in a model formula neither: its terms are variables joined by "
                  "+, -, * and : (no I(), powers or ratios); use a column the table holds")
_FORBIDDEN = [
    ("<<-", "assignment is not allowed; use the assign endpoint with a symbol name"),
    ("->>", "assignment is not allowed"),
    ("<-", "assignment is not allowed; use the assign endpoint with a symbol name"),
    ("->", "assignment is not allowed"),
    ("==", "comparison operators are not allowed; pass the operator as a string argument"),
    ("!=", "comparison operators are not allowed; pass the operator as a string argument"),
    ("<=", "comparison operators are not allowed; pass the operator as a string argument"),
    (">=", "comparison operators are not allowed; pass the operator as a string argument"),
    ("::", "namespace access (::) is not allowed; call registered functions by name"),
    ("[", "indexing with [ ] is not allowed"),
    ("]", "indexing with [ ] is not allowed"),
    ("`", "backtick-quoted names are not allowed"),
    ("{", "braces are not allowed"),
    ("}", "braces are not allowed"),
    (";", "only one call per request is allowed (no ';')"),
    ("%", "%-operators are not allowed"),
    ("<", "comparison operators are not allowed; pass the operator as a string argument"),
    (">", "comparison operators are not allowed; pass the operator as a string argument"),
    ("!", "logical operators are not allowed"),
    ("&", "logical operators are not allowed"),
    ("|", "logical operators are not allowed"),
    ("/", _NO_ARITHMETIC),
    ("^", _NO_ARITHMETIC),
    ("@", "slot access (@) is not allowed"),
    ("?", "help (?) is not allowed"),
    ("\\", "lambda functions are not allowed"),
]


@dataclass(frozen=True)
class Token:
    kind: str  # NAME, NUMBER, STRING, PUNCT, END
    text: str
    pos: int
    value: object = None


def _error(text: str, pos: int, message: str, rule: str | None = None) -> CallError:
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
                        raise _error(text, j, f"escape \\{esc} is not allowed in strings")
                    chars.append({"n": "\n", "t": "\t"}.get(esc, esc))
                    j += 2
                    continue
                chars.append(text[j])
                j += 1
            if j >= len(text):
                raise _error(text, i, "unterminated string")
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
                raise _error(text, i, f"'{word}' is not allowed")
            tokens.append(Token("NAME", word, i))
            i = name.end()
            continue
        for op, why in _FORBIDDEN:
            if text.startswith(op, i):
                raise _error(text, i, why)
        if ch in _PUNCT:
            tokens.append(Token("PUNCT", ch, i))
            i += 1
            continue
        raise _error(text, i, f"character {ch!r} is not allowed")
    tokens.append(Token("END", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str, limits: Limits) -> None:
        if len(text) > limits.max_length * 8:
            raise CallError(
                f"call text of {len(text)} characters is too long (limit {limits.max_length * 8}, "
                "eight times strings.max_length)",
                rule="strings.max_length",
            )
        self.text = text
        self.limits = limits
        self.tokens = tokenize(text)
        self.i = 0

    # helpers
    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.kind == "PUNCT" and tok.text == text

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.kind != "PUNCT" or tok.text != text:
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise _error(self.text, tok.pos, f"expected '{text}', found {found}")
        return tok

    def fail(self, tok: Token, message: str) -> CallError:
        return _error(self.text, tok.pos, message)

    # grammar
    def parse_root(self) -> Node:
        node = self.expr(level=0)
        tok = self.peek()
        if tok.kind != "END":
            if tok.kind == "PUNCT" and tok.text == "=":
                raise self.fail(tok, "assignment is not allowed; use the assign endpoint with a symbol name")
            if tok.kind == "PUNCT" and tok.text in "+-*:":
                raise self.fail(tok, f"operator '{tok.text}' is only allowed inside a model formula (y ~ x1 + x2)")
            raise self.fail(tok, f"unexpected {tok.text!r} after a complete expression")
        return node

    def expr(self, level: int) -> Node:
        if level > self.limits.max_depth:
            raise _error(
                self.text, self.peek().pos, f"nested deeper than {self.limits.max_depth} levels",
                rule="parser.max_depth",
            )
        if self.at("~"):
            return self.formula(None)
        node = self.primary(level)
        if self.at("~"):
            if not isinstance(node, (Symbol, Column)):
                raise self.fail(self.peek(), "the response of a formula must be a variable name")
            return self.formula(node)
        tok = self.peek()
        if tok.kind == "PUNCT" and tok.text in "+-*:":
            raise self.fail(tok, f"operator '{tok.text}' is only allowed inside a model formula (y ~ x1 + x2)")
        return node

    def primary(self, level: int) -> Node:
        tok = self.next()
        if tok.kind == "NUMBER":
            return Literal(tok.value)  # type: ignore[arg-type]
        if tok.kind == "STRING":
            return Literal(tok.value)  # type: ignore[arg-type]
        if tok.kind == "PUNCT" and tok.text == "-":
            num = self.next()
            if num.kind != "NUMBER":
                raise self.fail(tok, "operator '-' is only allowed before a number or inside a model formula")
            return Literal(-num.value)  # type: ignore[operator]
        if tok.kind == "PUNCT" and tok.text == "(":
            raise self.fail(tok, "parentheses for grouping are not allowed")
        if tok.kind != "NAME":
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise self.fail(tok, f"expected a value, found {found}")
        word = tok.text
        if word in ("TRUE", "FALSE"):
            return Literal(word == "TRUE")
        if word in ("NULL", "NA"):  # both read as "not given"
            return Literal(None)
        if self.at("("):
            return self.call(word, level)
        if self.at("$"):
            self.next()
            col = self.next()
            if col.kind not in ("NAME", "STRING"):
                raise self.fail(col, "expected a column name after '$'")
            name = col.text if col.kind == "NAME" else str(col.value)
            if self.at("$"):
                raise self.fail(self.peek(), "only one level of '$' access (table$column) is allowed")
            if self.at("("):
                raise self.fail(self.peek(), "calling a column is not allowed")
            return Column(word, name)
        return Symbol(word)

    def call(self, name: str, level: int) -> Node:
        open_tok = self.expect("(")
        if level + 1 > self.limits.max_depth:
            raise _error(
                self.text, open_tok.pos, f"nested deeper than {self.limits.max_depth} levels",
                rule="parser.max_depth",
            )
        args: list[Arg] = []
        while not self.at(")"):
            if args:
                self.expect(",")
            arg_name = None
            if self.peek().kind == "NAME" and self.peek(1).kind == "PUNCT" and self.peek(1).text == "=":
                arg_name = self.next().text
                self.next()
            elif self.peek().kind == "STRING" and self.peek(1).kind == "PUNCT" and self.peek(1).text == "=":
                arg_name = str(self.next().value)
                self.next()
            args.append(Arg(arg_name, self.expr(level + 1)))
        self.expect(")")
        if name == "c":
            return self.vector(args)
        return Call(name, tuple(args))

    def vector(self, args: list[Arg]) -> Vector:
        items = []
        for arg in args:
            if arg.name is not None:
                raise CallError(f"cannot parse {self.text!r}: named elements in c(...) are not allowed")
            if not isinstance(arg.value, Literal):
                raise CallError(f"cannot parse {self.text!r}: c(...) may only hold literal values")
            items.append(arg.value)
        vec = Vector(tuple(items))
        check_vector(vec)
        return vec

    # formulas
    def formula(self, response: Node | None) -> Formula:
        self.expect("~")
        terms: list[FormulaTerm] = []
        intercept = True
        sign = "+"
        while True:
            tok = self.peek()
            if tok.kind == "NUMBER" and tok.value in (0, 1):
                self.next()
                if (tok.value == 0 and sign == "+") or (tok.value == 1 and sign == "-"):
                    intercept = False
                else:
                    intercept = True
            else:
                variables = [self.formula_var()]
                while self.at(":") or self.at("*"):
                    op = self.next().text
                    if op == "*":
                        # a*b expands to a + b + a:b
                        right = self.formula_var()
                        for v in (variables[-1], right):
                            self._add_term(terms, (v,), sign)
                        variables = [variables[-1], right]
                    else:
                        variables.append(self.formula_var())
                self._add_term(terms, tuple(variables), sign)
            if self.at("+") or self.at("-"):
                sign = self.next().text
                continue
            break
        response_name = None
        if response is not None:
            response_name = response.to_text()  # type: ignore[union-attr]
        return Formula(response_name, tuple(terms), intercept)

    def _add_term(self, terms: list[FormulaTerm], variables: tuple[str, ...], sign: str) -> None:
        term = FormulaTerm(variables)
        if sign == "-":
            raise CallError(f"cannot parse {self.text!r}: removing a term with '-' is only allowed for the intercept (- 1)")
        if term not in terms:
            terms.append(term)

    def formula_var(self) -> str:
        tok = self.next()
        if tok.kind != "NAME" or tok.text in ("TRUE", "FALSE", "NULL", "NA"):
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise self.fail(tok, f"expected a variable name in the formula, found {found}")
        if self.at("("):
            raise self.fail(self.peek(), "function calls inside a formula are not allowed (no I(), log() or poly()): "
                                         "its terms are variables joined by +, -, * and :; use a column the table holds")
        if self.at("$"):
            self.next()
            col = self.next()
            if col.kind != "NAME":
                raise self.fail(col, "expected a column name after '$'")
            return f"{tok.text}${col.text}"
        return tok.text


def parse(text: str, limits: Limits) -> Node:
    """Parse call text into a call tree, or raise :class:`CallError` saying why not."""
    if not isinstance(text, str) or not text.strip():
        raise CallError("empty call text")
    return check_limits(_Parser(text, limits).parse_root(), limits)


def parse_formula(text: str, limits: Limits | None = None) -> Formula:
    """Parse text that must be a model formula (``y ~ x1 + x2``)."""
    node = parse(text, limits or Limits())
    if not isinstance(node, Formula):
        raise CallError(f"{text!r} is not a model formula (expected 'y ~ x1 + x2')")
    return node
