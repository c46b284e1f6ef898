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

The structured JSON form of a call (:func:`from_json`) is read here too: its ``formula`` and
``expr`` nodes are text for this parser.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dsfed_core.calltree import (
    ARITH_FUNCTIONS,
    COMPARISONS,
    NUMBER_LIMIT,
    Arg,
    Arith,
    Call,
    Column,
    Formula,
    FormulaTerm,
    Limits,
    Literal,
    Node,
    NumericVector,
    Scalar,
    Symbol,
    Vector,
    check_limits,
    check_vector,
)
from dsfed_core.errors import CallError
from dsfed_core.lexer import Token, syntax_error, tokenize
from dsfed_core.wire import decode_f64


class _Parser:
    def __init__(self, text: str, limits: Limits, arithmetic: bool = False) -> None:
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
        self.arithmetic = arithmetic  # the root may be an arithmetic expression (an assign text)

    # helpers
    def peek(self, offset: int = 0) -> Token:
        return self.tokens[min(self.i + offset, len(self.tokens) - 1)]

    def next(self) -> Token:
        """The next token of the call grammar: an operator of expressions is refused here, with its reason."""
        tok = self.take()
        if tok.kind == "OP":
            raise self.fail(tok, str(tok.value))
        return tok

    def take(self) -> Token:
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def at_op(self, *ops: str) -> bool:
        tok = self.peek()
        return tok.kind in ("OP", "PUNCT") and tok.text in ops

    def at(self, text: str) -> bool:
        tok = self.peek()
        return tok.kind == "PUNCT" and tok.text == text

    def expect(self, text: str) -> Token:
        tok = self.next()
        if tok.kind != "PUNCT" or tok.text != text:
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise syntax_error(self.text, tok.pos, f"expected '{text}', found {found}")
        return tok

    def fail(self, tok: Token, message: str) -> CallError:
        return syntax_error(self.text, tok.pos, message)

    # grammar
    def parse_root(self) -> Node:
        first, second = self.peek(), self.peek(1)
        a_call = (first.kind == "NAME" and second.kind == "PUNCT" and second.text == "("
                  and first.text not in ARITH_FUNCTIONS)
        node = self.arith(level=0) if self.arithmetic and not a_call else self.expr(level=0)
        tok = self.peek()
        if tok.kind == "OP":
            raise self.fail(tok, str(tok.value))
        if tok.kind != "END":
            if tok.kind == "PUNCT" and tok.text == "=":
                raise self.fail(tok, "assignment is not allowed; use the assign endpoint with a symbol name")
            if tok.kind == "PUNCT" and tok.text in "+-*:":
                raise self.fail(tok, f"operator '{tok.text}' is only allowed inside a model formula (y ~ x1 + x2)")
            raise self.fail(tok, f"unexpected {tok.text!r} after a complete expression")
        return node

    def expr(self, level: int) -> Node:
        if level > self.limits.max_depth:
            raise syntax_error(
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
            return self.column(word)
        return Symbol(word)

    def column(self, table: str) -> Column:
        """``table$column``, the '$' next."""
        self.expect("$")
        col = self.next()
        if col.kind not in ("NAME", "STRING"):
            raise self.fail(col, "expected a column name after '$'")
        name = col.text if col.kind == "NAME" else str(col.value)
        if self.at("$"):
            raise self.fail(self.peek(), "only one level of '$' access (table$column) is allowed")
        if self.at("("):
            raise self.fail(self.peek(), "calling a column is not allowed")
        return Column(table, name)

    def call(self, name: str, level: int) -> Node:
        open_tok = self.expect("(")
        if level + 1 > self.limits.max_depth:
            raise syntax_error(
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


    # arithmetic expressions (deriveDS, an assign text as ds.make sends it, a formula's I()), by R's
    # precedence from the lowest: |, &, !, comparison, + -, * /, unary minus, ^ (right to left).
    # Calls, parentheses, unary operators and exponents count towards parser.max_depth; chains of
    # binary operators are bounded by the length of the call text.
    def deeper(self, level: int, tok: Token) -> int:
        if level > self.limits.max_depth:
            raise syntax_error(self.text, tok.pos, f"nested deeper than {self.limits.max_depth} levels",
                         rule="parser.max_depth")
        return level

    def _chain(self, ops: tuple[str, ...], operand, level: int) -> Node:
        node = operand(level)
        while self.at_op(*ops):
            op = self.take().text
            node = Arith(op, (Arg(None, node), Arg(None, operand(level))))
        return node

    def arith(self, level: int) -> Node:
        return self._chain(("|",), self.arith_and, level)

    def arith_and(self, level: int) -> Node:
        return self._chain(("&",), self.arith_not, level)

    def arith_not(self, level: int) -> Node:
        if self.at_op("!"):
            level = self.deeper(level + 1, self.take())
            return Arith("!", (Arg(None, self.arith_not(level)),))
        return self.arith_compare(level)

    def arith_compare(self, level: int) -> Node:
        node = self.arith_sum(level)
        if self.at_op(*COMPARISONS):
            op = self.take().text
            node = Arith(op, (Arg(None, node), Arg(None, self.arith_sum(level))))
            if self.at_op(*COMPARISONS):
                raise self.fail(self.peek(), "comparisons do not chain (a < b < c); combine them with &")
        return node

    def arith_sum(self, level: int) -> Node:
        return self._chain(("+", "-"), self.arith_product, level)

    def arith_product(self, level: int) -> Node:
        return self._chain(("*", "/"), self.arith_unary, level)

    def arith_unary(self, level: int) -> Node:
        if self.at_op("-"):
            level = self.deeper(level + 1, self.take())
            return Arith("neg", (Arg(None, self.arith_unary(level)),))
        if self.at_op("+", "!"):
            raise self.fail(self.peek(), f"unary '{self.peek().text}' is not allowed here")
        return self.arith_power(level)

    def arith_power(self, level: int) -> Node:
        base = self.arith_atom(level)
        if self.at_op("^"):
            level = self.deeper(level + 1, self.take())
            return Arith("^", (Arg(None, base), Arg(None, self.arith_unary(level))))
        return base

    def arith_atom(self, level: int) -> Node:
        tok = self.take()
        if tok.kind == "NUMBER":
            return Literal(tok.value)  # type: ignore[arg-type]
        if tok.kind == "STRING":
            raise self.fail(tok, "strings are not allowed in an expression (it reads columns and numbers)")
        if tok.kind == "PUNCT" and tok.text == "(":
            inner = self.arith(self.deeper(level + 1, tok))
            self.expect(")")
            return Arith("(", (Arg(None, inner),))
        if tok.kind != "NAME":
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise self.fail(tok, f"expected a column or a number, found {found}")
        word = tok.text
        if word in ("TRUE", "FALSE", "NULL"):
            raise self.fail(tok, f"{word} is not a number: an expression reads columns and numbers (NA: missing)")
        if word == "NA":
            return Literal(None)
        if self.at("("):
            if word not in ARITH_FUNCTIONS:
                raise self.fail(tok, f"function {word!r} cannot be called in an expression; it may call "
                                     f"{', '.join(ARITH_FUNCTIONS)}")
            return self.arith_call(word, level)
        if self.at("$"):
            return self.column(word)
        return Symbol(word)

    def arith_call(self, name: str, level: int) -> Arith:
        open_tok = self.expect("(")
        level = self.deeper(level + 1, open_tok)
        args: list[Arg] = []
        while not self.at(")"):
            if args:
                self.expect(",")
            arg_name = None
            if self.peek().kind == "NAME" and self.peek(1).kind == "PUNCT" and self.peek(1).text == "=":
                named = self.next()
                if not (name == "log" and named.text == "base"):
                    raise self.fail(named, f"argument {named.text!r} is not taken in an expression (only log's base)")
                self.next()  # '='
                arg_name = named.text
            args.append(Arg(arg_name, self.arith(level)))
        self.expect(")")
        arity = {"log": (1, 2), "ifelse": (3, 3), "pmin": (2, 64), "pmax": (2, 64)}.get(name, (1, 1))
        if not arity[0] <= len(args) <= arity[1]:
            takes = arity[0] if arity[0] == arity[1] else f"{arity[0]} or more" if arity[1] > 2 else "1 or 2"
            raise self.fail(open_tok, f"{name}() takes {takes} argument(s), got {len(args)}")
        return Arith(name, tuple(args))

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
            raise CallError(f"cannot parse {self.text!r}: removing a term with '-' is only allowed for the "
                            "intercept (- 1)")
        if term not in terms:
            terms.append(term)

    def formula_var(self) -> str:
        tok = self.next()
        if tok.kind != "NAME" or tok.text in ("TRUE", "FALSE", "NULL", "NA"):
            found = repr(tok.text) if tok.kind != "END" else "the end"
            raise self.fail(tok, f"expected a variable name in the formula, found {found}")
        if self.at("("):
            return self.formula_transform(tok)
        if self.at("$"):
            return self.column(tok.text).to_text()
        return tok.text

    def formula_transform(self, tok: Token) -> str:
        """``factor(x)``, ``I(expr)`` or ``log(expr)`` (also ``exp``, ``sqrt``) as a term of a formula,
        named as R's ``model.matrix`` names it (``factor(tgrade)``, ``I(age^2)``, ``log(pnodes + 1)``)."""
        if tok.text == "factor":
            self.expect("(")
            inner = self.next()
            if inner.kind != "NAME":
                raise self.fail(inner, "factor() in a formula takes a variable name")
            name = self.column(inner.text).to_text() if self.at("$") else inner.text
            self.expect(")")
            return f"factor({name})"
        if tok.text == "I":
            self.expect("(")
            node: Node = self.arith(1)
            self.expect(")")
            text = f"I({node.to_text()})"
        elif tok.text in ("log", "exp", "sqrt"):
            node = self.arith_call(tok.text, 0)
            text = node.to_text()
        else:
            raise self.fail(tok, f"function {tok.text!r} is not taken in a formula: its terms are variables, "
                                 "factor(x), I(expr) and log(), exp() or sqrt() of an expression, joined by "
                                 "+, -, * and :")
        _formula_arithmetic(node, self.text)
        return text


_CUTTING = {*COMPARISONS, "&", "|", "!", "ifelse", "pmin", "pmax", "abs"}


def _formula_arithmetic(node: Node, text: str) -> None:
    """A formula's expressions hold arithmetic only: a comparison, ifelse, pmin, pmax or abs cuts a
    column at a value the analyst chose, which the site checks as a cut only in deriveDS."""
    if isinstance(node, Arith):
        if node.op in _CUTTING:
            raise CallError(f"cannot parse {text!r}: {node.op} in a model formula cuts a column at a value of the "
                            "analyst's choosing; make that variable with deriveDS (the site checks its cuts) and "
                            "use the new column in the formula", rule="disclosure.cut_history")
        for arg in node.args:
            _formula_arithmetic(arg.value, text)


def parse(text: str, limits: Limits, *, arithmetic: bool = False) -> Node:
    """Parse call text into a call tree, or raise :class:`CallError` saying why not. With
    ``arithmetic`` (an assign text, as dsBaseClient's ``ds.make`` sends ``D$age * 2``), the text may
    be an arithmetic expression (:class:`~dsfed_core.calltree.Arith`) instead of a call."""
    if not isinstance(text, str) or not text.strip():
        raise CallError("empty call text")
    return check_limits(_Parser(text, limits, arithmetic).parse_root(), limits)


def parse_expression(text: str, limits: Limits) -> Node:
    """Parse text that must be an arithmetic expression over columns and numbers (``log(D$x + 1)``)."""
    node = parse(text, limits, arithmetic=True)
    if not isinstance(node, (Arith, Column, Symbol)):
        raise CallError(f"{text[:60]!r} is not an arithmetic expression over columns and numbers",
                        hint="e.g. log(D$pnodes + 1) or ifelse(D$age > 50, 1, 0)")
    return node


def parse_formula(text: str, limits: Limits | None = None) -> Formula:
    """Parse text that must be a model formula (``y ~ x1 + x2``)."""
    node = parse(text, limits or Limits())
    if not isinstance(node, Formula):
        raise CallError(f"{text!r} is not a model formula (expected 'y ~ x1 + x2')")
    return node


def _scalar(value: Any, where: str) -> Scalar:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise CallError(f"{where}: numbers must be finite")
        return value
    raise CallError(f"{where}: a literal must be a number, string, boolean or null, got {type(value).__name__}")


def from_json(obj: Any, limits: Limits) -> Node:
    """Read a structured call, refusing anything but the node shapes above, within ``limits``."""
    return check_limits(_read(obj, limits, 0), limits)


def _read(obj: Any, limits: Limits, _level: int) -> Node:
    max_depth = limits.max_depth
    if _level > max_depth:
        raise CallError(f"call nested deeper than {max_depth} levels", rule="parser.max_depth")
    if not isinstance(obj, dict):
        raise CallError(f"not a call-tree node: {str(obj)[:60]!r}")
    if set(obj) == {"lit"}:
        return Literal(_scalar(obj["lit"], "literal"))
    if set(obj) == {"sym"} and isinstance(obj["sym"], str):
        return Symbol(obj["sym"])
    if set(obj) == {"col"}:
        col = obj["col"]
        if isinstance(col, list) and len(col) == 2 and all(isinstance(c, str) for c in col):
            return Column(col[0], col[1])
        raise CallError('"col" must be [table, column]')
    if set(obj) == {"vec"}:
        if not isinstance(obj["vec"], list):
            raise CallError('"vec" must be a list of literals')
        items = obj["vec"]
        if len(items) > 64 and all(type(v) is float or (type(v) is int and abs(v) <= NUMBER_LIMIT) for v in items):
            array = np.asarray(items, dtype=float)
            if not np.all(np.isfinite(array)):
                raise CallError("vector elements must be finite numbers")
            return NumericVector(array)
        vec = Vector(tuple(Literal(_scalar(v, "vector element")) for v in obj["vec"]))
        check_vector(vec)
        return vec
    if set(obj) == {"f64"} and isinstance(obj["f64"], str):
        try:
            array = decode_f64(obj)
        except ValueError as exc:
            raise CallError(str(exc)) from None
        if not np.all(np.isfinite(array)):
            raise CallError("vector elements must be finite numbers")
        return NumericVector(array)
    if set(obj) == {"formula"} and isinstance(obj["formula"], str):
        return parse_formula(obj["formula"], limits)
    if set(obj) == {"expr"} and isinstance(obj["expr"], str):
        return parse_expression(obj["expr"], limits)
    if "call" in obj and set(obj) <= {"call", "args", "kwargs"}:
        name = obj["call"]
        args = obj.get("args", [])
        kwargs = obj.get("kwargs", {})
        if not isinstance(name, str) or not isinstance(args, list) or not isinstance(kwargs, dict):
            raise CallError('a call is {"call": name, "args": [...], "kwargs": {...}}')
        nodes = [Arg(None, _read(a, limits, _level + 1)) for a in args]
        nodes += [Arg(str(k), _read(v, limits, _level + 1)) for k, v in kwargs.items()]
        return Call(name, tuple(nodes))
    raise CallError(f"not a call-tree node: {str(obj)[:60]!r}")
