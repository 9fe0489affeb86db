"""moemem from Python: per-GPU memory of LLM training steps (MoE, MLA, every parallel layout).

The functions take the command line's flags as keyword arguments, dashes as underscores
(``moemem.analyze(model='deepseek-v3', tp=2, pp=16, sp=True, recompute='full')``), run them
in-process through the same parser and writers as the ``moemem`` executable, and return what
``--format json`` prints, as Python objects. ``model`` is a preset name, a path to a
config.json, or a dict holding a config.json's keys. Bad input raises :class:`InputError`.
"""

import html
import json
import os

from . import _core

__all__ = ["InputError", "Report", "Layouts", "analyze", "explain", "count", "search", "models", "run"]
__version__ = _core.version


class InputError(ValueError):
    """Bad input, as the CLI's exit code 2: ``field``, ``value`` and what is ``accepted``.

    Where the command line itself is malformed (a keyword that is no flag), ``field`` is
    "command line", ``value`` the arguments and ``accepted`` CLI11's message.
    """

    def __init__(self, message, field, value, accepted):
        super().__init__(message)
        self.field = field
        self.value = value
        self.accepted = accepted


def _flag_args(flags):
    """Keyword arguments as CLI arguments: True is a bare flag, False and None leave it out,
    a list or tuple is comma-separated, anything else its str()."""
    args = []
    for key, value in flags.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


class _Call:
    """One command line: the subcommand's arguments and a model given as a dict, if any."""

    def __init__(self, command, flags):
        if "format" in flags:
            raise TypeError("format is chosen by the function (json; to_html() for the page)")
        flags = dict(flags)
        model = flags.pop("model", None)
        self.model_json = None
        self.model_name = "dict"
        self.args = [command]
        if isinstance(model, dict):
            self.model_json = json.dumps(model)
            self.model_name = str(model.get("_name_or_path") or "dict")
        elif model is not None:
            self.args += ["--model", os.fspath(model)]
        self.args += _flag_args(flags)

    def run(self, fmt, ok_codes=(0,)):
        code, out, err, error = _core.run(self.args + ["--format", fmt], self.model_json, self.model_name)
        if code == 2:
            message = err.strip().removeprefix("moemem: error: ").split("\n")[0]
            if error is not None:
                raise InputError(message, *error)
            raise InputError(message, "command line", " ".join(self.args), message)
        if code not in ok_codes:
            raise RuntimeError(f"moemem {' '.join(self.args)} exited with {code}: {err.strip()}")
        return out


def _iframe(page):
    # The page is a whole document with its own style: in an iframe it leaves the notebook's alone.
    return ('<iframe style="width:100%;height:900px;border:0" srcdoc="' + html.escape(page, quote=True)
            + '"></iframe>')


class Report(dict):
    """analyze's or explain's JSON document as a dict, with the HTML page of the same run."""

    def __init__(self, data, call):
        super().__init__(data)
        self._call = call

    def to_dict(self):
        """A plain dict (a deep copy) of the JSON document."""
        return json.loads(json.dumps(self))

    def to_html(self):
        """The self-contained HTML page that --format html writes for the same arguments."""
        return self._call.run("html")

    def _repr_html_(self):
        return _iframe(self.to_html())


class Layouts(list):
    """search's layouts that fit, best first; ``summary`` is its whole JSON document."""

    def __init__(self, summary, call):
        super().__init__(summary.get("layouts", []))
        self.summary = summary
        self._call = call

    def to_html(self):
        return self._call.run("html", ok_codes=(0, 1))

    def _repr_html_(self):
        return _iframe(self.to_html())


def analyze(**flags):
    """Memory of every pipeline stage (``moemem analyze``); returns a :class:`Report`."""
    call = _Call("analyze", flags)
    return Report(json.loads(call.run("json")), call)


def explain(stage, **flags):
    """Every byte of one stage at its peak (``moemem explain --stage N``); returns a :class:`Report`."""
    call = _Call("explain", dict(flags, stage=stage))
    return Report(json.loads(call.run("json")), call)


def count(**flags):
    """The parameter inventory (``moemem count``, e.g. ``by='layer'``); returns a dict."""
    return json.loads(_Call("count", flags).run("json"))


def search(**flags):
    """Layouts that fit on ``gpus`` GPUs (``moemem search``); returns :class:`Layouts`, empty when none fits."""
    call = _Call("search", flags)
    return Layouts(json.loads(call.run("json", ok_codes=(0, 1))), call)


def models():
    """The bundled presets (``moemem models``): a list of dicts."""
    return json.loads(_Call("models", {}).run("json"))["models"]


def run(*args):
    """``moemem args...`` in-process: (exit code, stdout, stderr), no exception on bad input."""
    code, out, err, _ = _core.run([str(a) for a in args])
    return code, out, err
