"""A kernel's signature read from its CUDA source: each parameter's name, C type and the numpy type it takes.

:func:`parse_signature` reads the parameters of ``__global__ ... name(...)`` (a template instantiated by a name
expression such as ``saxpy<float>``); :mod:`pytest_jetmem.cuda.launch` packs launch arguments against them.

Hand-written, not pycparser or libclang: pycparser reads C99 (no templates, no ``__global__``), libclang is a native
library that needs the CUDA headers to parse a ``.cu``, and the driver's ``cuFuncGetParamInfo`` gives sizes only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

POINTER = "pointer"

# C parameter types -> numpy dtypes (LP64, as on Linux aarch64 and x86-64).
C_TYPES: dict[str, np.dtype] = {
    k: np.dtype(v)
    for k, v in {
        "float": "float32",
        "double": "float64",
        "__half": "float16",
        "half": "float16",
        "bool": "bool",
        "char": "int8",
        "signed char": "int8",
        "unsigned char": "uint8",
        "short": "int16",
        "unsigned short": "uint16",
        "int": "int32",
        "signed": "int32",
        "signed int": "int32",
        "unsigned": "uint32",
        "unsigned int": "uint32",
        "long": "int64",
        "unsigned long": "uint64",
        "long long": "int64",
        "unsigned long long": "uint64",
        "size_t": "uint64",
        "ptrdiff_t": "int64",
        "int8_t": "int8",
        "uint8_t": "uint8",
        "int16_t": "int16",
        "uint16_t": "uint16",
        "int32_t": "int32",
        "uint32_t": "uint32",
        "int64_t": "int64",
        "uint64_t": "uint64",
    }.items()
}
_QUALIFIERS = {"const", "volatile", "__restrict__", "restrict", "__restrict", "struct"}
_TYPE_WORDS = {w for k in C_TYPES for w in k.split()} | {"void"}


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name and a numpy dtype, ``POINTER``, or None when unknown; ``ctype``: its C
    type as declared, template arguments substituted (``const float*``; "" where not read from a source)."""

    name: str
    kind: np.dtype | str | None
    ctype: str = field(default="", compare=False)  # what the kernel expects; equal parameters pass alike

    def declared(self) -> str:
        """``const float* x`` (the parameter as declared), or its name where the type was not read."""
        return f"{self.ctype} {self.name}" if self.ctype else self.name

    def describe(self) -> str:
        if self.kind is None:
            return f"{self.name} (type not known: pass a numpy scalar)"
        return f"{self.name} ({'a pointer' if self.kind == POINTER else self.kind})"


def parse_signature(source: str, name: str) -> list[Param] | None:
    """The parameters of ``__global__ ... name(...)`` in ``source``, or None if it cannot be read.

    ``name`` may be a C++ name expression (``saxpy<float>``, ``ns::k<float, 4>``): the template's
    parameters are substituted with the expression's arguments (or their defaults), so ``T* x, T a``
    of ``saxpy<float>`` read as a pointer and a float32. A parameter whose type is not a known scalar
    or a pointer (a struct, a template type left open) has kind None.
    """
    base, targs = _split_name(name)
    if base is None:
        return None
    code = _strip_comments(source)
    found = _declaration(code, base)
    if found is None:
        return None
    at, body = found
    substitutions = _substitutions(code, at, targs)
    if substitutions is None:
        return None
    body = body.strip()
    if not body or body == "void":
        return []
    return [_param(i, raw, substitutions) for i, raw in enumerate(_split_top(body))]


def _declaration(code: str, base: str) -> tuple[int, str] | None:
    """(where its ``__global__`` starts, the text between its parentheses) of the kernel ``base`` in ``code``."""
    m = re.search(rf"__global__[^;{{]*?\b{re.escape(base)}\s*\(", code)
    if not m:
        return None
    body = _balanced(code, m.end() - 1, "(", ")")
    return None if body is None else (m.start(), body)


def _substitutions(code: str, global_at: int, targs: list[str] | None) -> dict[str, str] | None:
    """Template parameter -> the name expression's argument (or its default); {} for a plain name, None where
    the arguments do not match the template heading the declaration at ``global_at``."""
    if targs is None:
        return {}
    tparams = _template_params(code, global_at)
    if tparams is None or len(targs) > len(tparams):
        return None
    values = [targs[i] if i < len(targs) else default for i, (_, default) in enumerate(tparams)]
    if any(v is None for v in values):
        return None
    return {pname: str(value) for (pname, _), value in zip(tparams, values, strict=True)}


def _param(index: int, raw: str, substitutions: dict[str, str]) -> Param:
    """Parameter ``index`` of a kernel from its declaration ``raw`` (template parameters substituted)."""
    text = _substitute(raw.split("=")[0].strip(), substitutions)
    pointer = "*" in text or "&" in text
    templated = "<" in text
    text = re.sub(r"(?:::)?\b(?:cuda\s*::\s*)?std\s*::\s*", " ", text)  # cuda::std::size_t, std::int32_t
    tokens = [t for t in re.split(r"[\s*&]+", re.sub(r"<.*>", " ", text)) if t and t not in _QUALIFIERS]
    named = len(tokens) >= 2 and tokens[-1] not in _TYPE_WORDS
    pname = tokens[-1] if named else f"arg{index}"
    base_type = " ".join(tokens[:-1] if named else tokens)
    return Param(pname, _kind(pointer, templated, base_type), _ctype(text, pname if named else ""))


def _substitute(text: str, substitutions: dict[str, str]) -> str:
    """``text`` with each template parameter's name replaced by its value (as whole words)."""
    for tname, value in substitutions.items():
        text = re.sub(rf"\b{re.escape(tname)}\b", f" {value} ", text)
    return text


def _kind(pointer: bool, templated: bool, base_type: str) -> np.dtype | str | None:
    """:data:`POINTER`, the numpy dtype of a known scalar type, or None (a template type, a struct)."""
    if pointer:
        return POINTER
    return None if templated else C_TYPES.get(base_type)


def _ctype(text: str, pname: str) -> str:
    """A parameter's declaration ``text`` without its name, spaced as C is usually written (``const float*``)."""
    if pname:
        text = re.sub(rf"\b{re.escape(pname)}\s*$", "", text.strip())
    text = re.sub(r"([*&])\s+(?=[*&])", r"\1", re.sub(r"\s+", " ", text))
    return re.sub(r"\s*([*&]+)\s*", r"\1 ", text).strip()


def _split_name(name: str) -> tuple[str | None, list[str] | None]:
    """``ns::saxpy<float, 4>`` -> (``saxpy``, [``float``, ``4``]); a plain name has no argument list (None)."""
    text = name.strip()
    args: list[str] | None = None
    if text.endswith(">") and "<" in text:
        open_at = text.index("<")
        inner = _balanced(text, open_at, "<", ">")
        if inner is None:
            return None, None
        args = [a.strip() for a in _split_top(inner)] if inner.strip() else []
        text = text[:open_at]
    ident = text.split("::")[-1].strip()
    return (ident if re.fullmatch(r"[A-Za-z_]\w*", ident) else None), args


def _balanced(text: str, open_at: int, opening: str, closing: str) -> str | None:
    """The text between ``text[open_at]`` (an opening bracket) and its matching closing one."""
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == opening:
            depth += 1
        elif text[i] == closing:
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : i]
    return None


def _split_top(text: str) -> list[str]:
    """Split at commas outside ``<>``, ``()``, ``[]`` and ``{}``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _template_params(code: str, global_at: int) -> list[tuple[str, str | None]] | None:
    """(name, default) of each parameter of the ``template <...>`` heading the declaration at ``global_at``."""
    head_start = max(code.rfind(";", 0, global_at), code.rfind("}", 0, global_at)) + 1
    head = code[head_start:global_at]
    t = re.search(r"\btemplate\s*<", head)
    if not t:
        return None
    inner = _balanced(head, t.end() - 1, "<", ">")
    if inner is None:
        return None
    out: list[tuple[str, str | None]] = []
    for raw in _split_top(inner):
        decl, _, default = raw.partition("=")
        if "..." in decl:
            return None  # a parameter pack: the arguments cannot be matched one to one
        words = re.findall(r"[A-Za-z_]\w*", decl)
        if len(words) < 2:
            return None
        out.append((words[-1], default.strip() or None))
    return out


def _strip_comments(source: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)
