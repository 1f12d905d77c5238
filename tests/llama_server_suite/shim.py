#!/usr/bin/env python3
"""The server the llama-server test files start (their LLAMA_SERVER_BIN_PATH).

Their presets name Hugging Face models, which nothing here downloads: each is
mapped to a local random-weight test model (models.json, written by `run`),
and the server of SUITE_TARGET is exec'd in this process, so the test's pid
is the server's:
- llama-server: its own flags, with `--model FILE` for the hub's names;
- reclaim: `reclaim serve` with the flags that mean the same thing, and a
  --config file for what reclaim sets per model (context of each sequence,
  sequences, the sampling a request leaves out).
A preset with no local stand-in exits 3, naming it: that test fails on both
servers and is counted apart.
"""
import json
import os
import sys
import tempfile

# llama-server's flags that take a value (tests/utils.py's start()).
VALUED = {
    "--host", "--port", "--temp", "--seed", "--model", "-m", "--model-url", "--model-draft",
    "--hf-repo", "--hf-file", "--models-dir", "--models-max", "--models-preset", "--cors-origins",
    "--batch-size", "--ubatch-size", "--threads", "--n-gpu-layers", "--pooling", "--alias",
    "--tags", "--ctx-size", "--parallel", "-ctk", "-ctv", "-fa", "--n-predict",
    "--slot-save-path", "--grp-attn-n", "--grp-attn-w", "--lora", "--spec-type", "--api-key",
    "--spec-draft-n-max", "--spec-draft-n-min", "--spec-synth-len", "--spec-synth-rates",
    "--reasoning-format", "--reasoning", "--chat-template", "--chat-template-file",
    "--mmproj-url", "--media-path", "--sleep-idle-seconds", "--cache-ram", "--tools",
    "--tools-runtime", "--mcp-servers-config", "--mcp-servers-json",
}


def parse(argv):
    """llama-server's argv as (flags with their values, lists for repeats)."""
    opts, i = {}, 0
    while i < len(argv):
        a = argv[i]
        if a in VALUED:
            if i + 1 >= len(argv):
                sys.exit(f"shim: {a} wants a value")
            opts.setdefault(a, []).append(argv[i + 1])
            i += 2
        else:
            opts.setdefault(a, []).append(None)
            i += 1
    return opts


def last(opts, flag, default=None):
    return opts[flag][-1] if flag in opts else default


def local_model(opts, table):
    """The local file for --model, or for --hf-repo[/--hf-file]; None without one."""
    if "--model" in opts or "-m" in opts:
        return last(opts, "--model") or last(opts, "-m")
    repo = last(opts, "--hf-repo")
    if repo is None:
        return None
    key = repo + ("/" + last(opts, "--hf-file") if "--hf-file" in opts else "")
    if key not in table:
        print(f"shim: no local stand-in for the preset model {key}", file=sys.stderr)
        sys.exit(3)
    return table[key]


def llama_server_argv(argv, opts, model):
    out, i = [os.environ["SUITE_LLAMA_SERVER"]], 0
    while i < len(argv):
        a = argv[i]
        if a in ("--hf-repo", "--hf-file"):
            i += 2
            continue
        if a != "--offline":
            out.append(a)
        i += 1
    if model and "--model" not in opts and "-m" not in opts:
        out += ["--model", model]
    return out


def toml_str(s):
    return json.dumps(s)  # a JSON string is a TOML basic string


def reclaim_config(opts, model):
    """A --config file: one model with llama-server's per-server settings."""
    # llama-server's --alias is a comma-separated list: the first is the name.
    names = [a.strip() for a in (last(opts, "--alias") or "").split(",") if a.strip()]
    alias = names[0] if names else os.path.basename(model).removesuffix(".gguf")
    parallel = int(last(opts, "--parallel", "1") or 1)
    lines = [f"[models.{toml_str(alias)}]", f"path = {toml_str(model)}", f"parallel = {parallel}"]
    if "--pooling" in opts:
        lines.append(f"pooling = {toml_str(last(opts, '--pooling'))}")
    if "--no-jinja" in opts and "--jinja" not in opts:
        lines.append("jinja = false")
    if len(names) > 1:
        lines.append("aliases = [" + ", ".join(toml_str(a) for a in names[1:]) + "]")
    if "--ctx-size" in opts:
        # llama-server splits --ctx-size across its slots; reclaim's ctx is each sequence's.
        lines.append(f"ctx = {max(16, int(last(opts, '--ctx-size')) // parallel)}")
    lines.append(f"[models.{toml_str(alias)}.defaults]")
    if "--temp" in opts:
        lines.append(f"temperature = {float(last(opts, '--temp'))}")
    if "--seed" in opts:
        lines.append(f"seed = {int(last(opts, '--seed'))}")
    reasoning = last(opts, "--reasoning", "auto")
    if reasoning != "auto":  # llama-server's default for every request's enable_thinking
        lines.append(f"chat_template_kwargs = {{ enable_thinking = {'true' if reasoning == 'on' else 'false'} }}")
    if "--verbose" in opts:  # llama-server's verbosity answers every request with __verbose
        lines.append("verbose = true")
    if int(last(opts, "--n-predict", "-1")) >= 0:  # -1: unbounded, reclaim's default too
        lines.append(f"max_tokens = {int(last(opts, '--n-predict'))}")
    fd, path = tempfile.mkstemp(prefix="reclaim-", suffix=".toml", dir=os.environ.get("SUITE_WORK"))
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def reclaim_argv(opts, model):
    out = [os.environ["SUITE_RECLAIM"], "serve", "--host", last(opts, "--host", "127.0.0.1"),
           "--port", last(opts, "--port", "8080")]
    if model:
        out += ["--config", reclaim_config(opts, model)]
    if "--models-dir" in opts:
        out += ["--models-dir", last(opts, "--models-dir")]
    if "--models-max" in opts:
        out += ["--max-loaded", last(opts, "--models-max")]
    if "--no-models-autoload" in opts:
        out.append("--no-autoload")
    for key in opts.get("--api-key", []):
        out += ["--api-key", key]
    for origins in opts.get("--cors-origins", []):
        for o in origins.split(","):
            out += ["--cors-origin", o.strip()]
    if "--batch-size" in opts:
        out += ["--batch", last(opts, "--batch-size")]
    if "--threads" in opts:
        out += ["--threads", last(opts, "--threads")]
    if "--n-gpu-layers" in opts:
        out += ["--gpu-layers", last(opts, "--n-gpu-layers")]
    if "--cache-ram" in opts:
        out += ["--cache-ram", f"{last(opts, '--cache-ram')}MiB"]
    if "--sleep-idle-seconds" in opts:
        out += ["--keep-alive", f"{last(opts, '--sleep-idle-seconds')}s"]
    if "--chat-template-file" in opts:
        with open(last(opts, "--chat-template-file")) as f:
            out += ["--chat-template", f.read()]
    elif "--chat-template" in opts:
        out += ["--chat-template", last(opts, "--chat-template")]
    if "--verbose" in opts:
        out.append("--verbose")
    return out


def main():
    argv = sys.argv[1:]
    opts = parse(argv)
    with open(os.environ["SUITE_MODELS"]) as f:
        table = json.load(f)
    model = local_model(opts, table)
    target = os.environ.get("SUITE_TARGET", "reclaim")
    args = llama_server_argv(argv, opts, model) if target == "llama-server" else reclaim_argv(opts, model)
    sys.stdout.flush()
    os.execv(args[0], args)


if __name__ == "__main__":
    main()
