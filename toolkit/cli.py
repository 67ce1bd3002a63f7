"""`hrt`: ingest a corpus, search it, run a pipeline over a query set, and evaluate runs.

Expected mistakes (bad files, wrong store, missing extension) print one clear line and exit non-zero;
tracebacks are for bugs.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import click
import polars as pl

from .errors import ConfigError, InputError, ToolkitError

MODES = {"lexical": "bm25-only", "dense": "vector-only", "hybrid": "default"}
DEFAULT_MEASURES = ("nDCG@10", "R@5", "R@10", "MRR@10")


@contextlib.contextmanager
def _config_warnings() -> Iterator[None]:
    """User warnings (`config.ConfigWarning`: settings with no effect; a learned model on other settings; tuning
    on test) print as `warning: ...` on stderr, once each however often a command raises them; other
    categories (deprecations) keep Python's display, with its source line."""
    seen: set[str] = set()
    with warnings.catch_warnings():
        python_display = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None):
            from .config import ConfigWarning  # a config module only when something warned

            if not issubclass(category, ConfigWarning | UserWarning):  # e.g. a DeprecationWarning: Python's display
                python_display(message, category, filename, lineno, file, line)
            elif str(message) not in seen:  # ours (and a library's user-facing ones): one line, no source line
                seen.add(str(message))
                click.echo(f"warning: {message}", err=True)

        warnings.showwarning = show
        yield


@contextlib.contextmanager
def _log_lines() -> Iterator[None]:
    """The `toolkit` logger's lines (skipped files, waits, notes) on stderr while a command runs, as they were when
    Python's last-resort handler printed them: the package gives the logger a NullHandler, so that a library user's
    program prints nothing unless it configures logging (user trial BP)."""
    class Echo(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            try:
                click.echo(record.getMessage(), err=True)  # the stderr of the moment (click's CliRunner swaps it)
            except Exception:  # noqa: BLE001 - a log line never ends a command
                self.handleError(record)

    log, handler = logging.getLogger("toolkit"), Echo(logging.WARNING)
    log.addHandler(handler)
    try:
        yield
    finally:
        log.removeHandler(handler)


# Exit codes (README, "Exit codes"): scripts and agent harnesses branch on them.
EXIT_ERROR = 2  # bad input, a missing or damaged file, a usage error (click's own code for those)
EXIT_BUSY = 75  # the store is locked by another process (EX_TEMPFAIL): retry later
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); SIGTERM ends a command with 143 (`interrupts.exit_code`)
EXIT_BROKEN_PIPE = 141  # the reader of stdout went away (128 + SIGPIPE), as other Unix tools
EXIT_GATE = 3  # `hrt eval --max-drop`: a run is significantly worse than the baseline by more than allowed
EXIT_DAMAGED = 74  # a store file DuckDB finds damaged or cannot read (EX_IOERR): rebuild it (a CI job drops its cache)
_PROGRAM = False  # `hrt` runs as a program (`_Group.__call__`), not inside another's process (click's CliRunner)
_EXIT_AT_ONCE = False  # set by `hrt search` in a program: the process ends when it is done (`_exit_at_once`)


def _exit_at_once(code: object) -> None:
    """End `hrt search`, run as a program, without the interpreter's teardown, which frees every object of every
    module one by one (~13 ms of a cold search): exit handlers run and stdout and stderr are flushed first, and the exit
    code is Python's own. Anything else is left to Python: a code it would print (not an int), another thread still
    running (Python waits for it), output that cannot be flushed (Python reports it). A search keeps nothing open for
    the teardown to close: its store is closed by its `with` block and it writes no file."""
    import threading

    if not (code is None or isinstance(code, int)) or threading.active_count() > 1:
        return
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        atexit._run_exitfuncs()  # as Python runs them at exit; they may write too
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except Exception:  # noqa: BLE001 - Python's own exit says it (e.g. a closed pipe: "Exception ignored", 120)
        return
    os._exit(code or 0)


def _broken_pipe() -> None:
    """The reader of stdout went away: exit 141 (128 + SIGPIPE) as other Unix tools, without a second error when
    Python flushes stdout at exit."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(EXIT_BROKEN_PIPE)


def _flush_stdout() -> None:
    """Write what is buffered for stdout now, while an error can still be said in one line: a full disk
    (`>/dev/full`) surfaced at exit as Python's "Exception ignored" and exit code 120 (user trial BA). The failed
    bytes are dropped (fd 1 pointed at /dev/null) so that the exit's own flush does not fail again."""
    if sys.stdout is None:
        return
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise ToolkitError(f"the output could not be written to stdout ({e.strerror or e})") from None


def _echo_whole(text: str) -> None:
    """`click.echo(text)`, but every byte or a BrokenPipeError: CPython's buffered stdout took a write the kernel cut
    short (a pipe whose reader went away mid-output returns the bytes it took, 65,536 of 145,177) as done, and
    `hrt search` exited 0 having lost the rest (user trial BR); the documented code is 141. The text is written with
    `os.write` until all of it is out: the next write after a reader left fails with EPIPE. A terminal's stdout, and
    one without a file descriptor (click's test runner), go through click as before."""
    out = sys.stdout
    try:
        fd = out.fileno()
        plain = not out.isatty()
    except (AttributeError, OSError, ValueError):
        plain = False
    if not plain:
        click.echo(text)
        return
    out.flush()
    view = memoryview((text + "\n").encode(out.encoding or "utf-8", errors=out.errors or "strict"))
    while view:
        view = view[os.write(fd, view):]


def _need_stdout() -> None:
    """Results on a closed stdout (`hrt search ... >&-`) went nowhere with exit code 0 (user trial BA)."""
    if sys.stdout is None:
        raise ToolkitError("stdout is closed: the results have nowhere to go (redirect it to a file or /dev/null)")


class _Group(click.Group):
    def __call__(self, *args, **kwargs):
        """`hrt` run as a program: its console script and `python -m toolkit.cli` call `main()` with no arguments (the
        command line is sys.argv). A program calling `main([...])` in its own process, or click's CliRunner (which calls
        `main.main`), changes none of the below (the review: the environment and exit hooks leaked into the host).
        What is left at exit is frozen (`gc.freeze`), so the collections Python runs while
        shutting down skip it: ~40-70 ms of a cold `hrt search`, spent on the objects the imports made. Only
        garbage in reference cycles goes unfinalised (the process ends); nothing of the toolkit's waits on it:
        stores and files are closed by their `with` blocks, and exit handlers and reference counting still run.

        pydantic looks for plugins in every installed package's entry points when the config's models are built
        (~5 ms of a cold search), and `hrt` has no use for one: PYDANTIC_DISABLE_PLUGINS is set for the program
        (and the processes it starts), unless the user set it (PYDANTIC_DISABLE_PLUGINS= loads them all again).
        `hrt search` then ends the process without the interpreter's teardown (`_exit_at_once`)."""
        global _PROGRAM
        if not args and not kwargs.get("args") and not _PROGRAM:
            _PROGRAM = True
            atexit.register(gc.freeze)
            os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
            try:
                rv = super().__call__(*args, **kwargs)
            except SystemExit as e:  # click ends every command so
                if _EXIT_AT_ONCE:
                    _exit_at_once(e.code)
                raise
            if _EXIT_AT_ONCE:
                _exit_at_once(None)
            return rv
        return super().__call__(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:  # noqa: D102
        try:  # `hrt --help | true` and `--version`: printed while the top-level options are parsed, before invoke
            return super().parse_args(ctx, args)
        except BrokenPipeError:
            _broken_pipe()
            raise  # not reached

    def invoke(self, ctx: click.Context):  # noqa: D102 - turns expected errors into a message and an exit code
        from . import interrupts

        interrupts.install()
        _tolerant_output()
        with _visible_streams():
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context):
        from . import interrupts

        debug = os.environ.get("HRT_DEBUG", "").lower() in ("1", "true", "yes")  # the traceback behind an error line
        try:
            with _config_warnings(), _log_lines():
                out = super().invoke(ctx)
            interrupts.check()  # a Ctrl-C a library swallowed still ends the command as one
            _flush_stdout()
            return out
        except ToolkitError as e:
            if debug:  # the traceback, and the same exit code a harness branches on
                import traceback

                traceback.print_exc()
            click.echo(f"error: {e}", err=True)
            sys.exit({"StoreBusyError": EXIT_BUSY, "StoreDamagedError": EXIT_DAMAGED}.get(type(e).__name__, EXIT_ERROR))
        except BrokenPipeError:  # `hrt presets | head -1`: not an error, nothing more to say
            _broken_pipe()
        except OSError as e:  # a folder without write permission, a full disk: the machine, not the input
            if debug:
                raise
            click.echo(f"error: {e}", err=True)
            sys.exit(EXIT_ERROR)
        except UnicodeEncodeError as e:
            if debug:
                raise
            bad = e.object[e.start:e.end] if isinstance(e.object, str) else ""
            if e.reason == "surrogates not allowed":  # lone surrogates: bytes that are not UTF-8 in a path, query or stdin
                try:  # a byte a file name or stdin held: shown as that byte
                    shown = bad.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
                except UnicodeEncodeError:  # a surrogate that stands for no byte (a "\ud800" escape in JSON)
                    shown = bad.encode("ascii", "backslashreplace").decode()
                click.echo(f"error: text that is not valid UTF-8 ({shown}) in a path, a query or input: use UTF-8", err=True)
            else:  # output in an encoding that lacks a character (a pipe or file under a latin-1 locale): the first
                # one only (user trial BC: a table's box drawing made a 612-character error of the whole run of them)
                shown = bad[:1].encode("ascii", "backslashreplace").decode()
                click.echo(f"error: the output encoding ({e.encoding}) cannot write {shown}: use a UTF-8 locale or "
                           "PYTHONIOENCODING=utf-8 (nothing was written in its place)", err=True)
            sys.exit(EXIT_ERROR)
        except (KeyboardInterrupt, Exception) as e:
            if interrupts.is_interrupt(e):  # one line, never a traceback; a write in progress was rolled back
                click.echo(interrupts.word(), err=True)
                sys.exit(interrupts.exit_code())
            # A store file DuckDB finds damaged (a checksum that does not match, a truncated file): one line,
            # not a traceback (duckdb is not imported here: `hrt --help` stays light).
            from_duckdb = type(e).__module__.lstrip("_").startswith("duckdb")
            if from_duckdb and type(e).__name__ == "PermissionException" and not debug:  # `Store._sandbox` at work
                click.echo("error: DuckDB refused SQL access to a file or the network, which a store never needs "
                           f"({str(e).splitlines()[0]}): SQL kept in the store file asked for it, so the file was "
                           "altered; do not use it", err=True)
                sys.exit(EXIT_ERROR)
            if from_duckdb and type(e).__name__ == "IOException" and not debug:
                # Its own code (user trial BB): a CI job restoring a cached store can drop the cache and rebuild,
                # where exit 2 (bad input) cannot be told apart from a bad config.
                click.echo(f"error: a store file is damaged or cannot be read: {str(e).splitlines()[0]}", err=True)
                sys.exit(EXIT_DAMAGED)
            # A full disk at commit (TransactionException: "Could not write file ...: No space left on device") or
            # DuckDB out of memory: the machine, not a bug. Any other transaction error is a bug: as raised.
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            machine = ("No space left" in msg or "Could not write file" in msg) if type(e).__name__ == "TransactionException" else \
                type(e).__name__ == "OutOfMemoryException"
            if from_duckdb and machine and not debug:
                click.echo(f"error: the store could not complete the operation: {msg}", err=True)
                sys.exit(EXIT_ERROR)
            raise


@contextlib.contextmanager
def _visible_streams() -> Iterator[None]:
    """Every message `hrt` writes to stderr (errors, warnings, notes, a skipped file's name, a scope), and all it
    writes to a terminal's stdout, with control characters escaped (`terminal.VisibleStream`): a file name or
    scope holding an OSC sequence set the terminal's title (user trial AI). Data on a piped stdout is exact."""
    from .terminal import VisibleStream

    out, err = sys.stdout, sys.stderr
    if err is not None:  # None: file descriptor 2 closed (`2>&-`)
        sys.stderr = VisibleStream(err)  # type: ignore[assignment]
    if out is not None and out.isatty():
        sys.stdout = VisibleStream(out)  # type: ignore[assignment]
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


def _tolerant_output() -> None:
    """A terminal that cannot encode every character (an ISO-8859-1 locale) shows the rest escaped (\\u2026)
    instead of failing on the first "…" or CJK snippet. Only a terminal: JSON or a TREC run written to a pipe or
    file in such an encoding still fails rather than carry altered ids and text."""
    stream = sys.stdout
    enc = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
    if enc and enc != "utf8" and hasattr(stream, "reconfigure") and stream.isatty():
        with contextlib.suppress(Exception):
            stream.reconfigure(errors="backslashreplace")


def _interrupted_write(e: BaseException, st, gen: str, what: str = "ingest") -> None:
    """Ctrl-C during `hrt ingest` (or `hrt delete`): say whether anything was stored (the write is one
    transaction, rolled back unless the interrupt came after its commit, e.g. while the HNSW index was
    rebuilt), then exit 130."""
    from . import interrupts

    if not interrupts.is_interrupt(e):
        return
    try:
        stored = st.generation() != gen
    except Exception:  # noqa: BLE001 - the store may be closing; then say only what is certain
        click.echo(interrupts.word(), err=True)
        sys.exit(interrupts.exit_code())
    done = "the documents were stored" if what == "ingest" else "the documents were deleted"
    click.echo(f"{interrupts.word()}: " + (f"{done}, but what follows the write (the HNSW vector index) may be incomplete: run "
                                  f"the same `hrt {what}` again" + (" with --missing-ok" if what == "delete" else "")
                                  if stored else f"nothing of this {what} was stored; the store is as it was"
                                  + (" (embeddings it computed before the interrupt, if any, are kept in the store's cache: "
                                     "running it again does not compute them again)" if what == "ingest" else "")), err=True)
    sys.exit(interrupts.exit_code())


@contextlib.contextmanager
def _cycle_collector_paused() -> Iterator[None]:
    """Python's cycle collector off for the command: its passes over the objects the imports create (pydantic's
    models, numpy, the pipeline's modules) took ~25 ms of a cold `hrt search`. A search makes little cyclic
    garbage; reference counting frees the rest. On again afterwards, for a caller that goes on in-process."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _numpy_with_one_blas_thread() -> None:
    """Import numpy with one OpenBLAS thread, for a search that multiplies no matrices (no dense retrieval: one
    query's BM25 runs in SQL): OpenBLAS starts a thread per core, with its buffers, as numpy loads, ~35 ms of a cold
    `hrt search --mode lexical`. Only in `hrt` run as a program, before anything imported numpy, and when the user
    has not set OPENBLAS_NUM_THREADS; set for the import alone (OpenBLAS reads it once, as it loads)."""
    if not _PROGRAM or "numpy" in sys.modules or "OPENBLAS_NUM_THREADS" in os.environ:
        return
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        import numpy  # noqa: F401
    finally:
        del os.environ["OPENBLAS_NUM_THREADS"]


def _progress() -> bool:
    """Progress bars only for a person at a terminal: in a CI log or a harness's capture they are lines of
    carriage returns. TQDM_DISABLE (tqdm's own switch) turns them off at a terminal too."""
    from .progress import someone_watching

    return someone_watching()


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from .provenance import code_version

        click.echo(f"hrt, version {code_version()}")
        ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show the version (and the git commit of a checkout) and exit.")
def main() -> None:
    """Hybrid retrieval toolkit: BM25 + dense search in one DuckDB file, fusion, guarded reranking, dedup.

    Typical session: `hrt ingest notes/ --store mem.duckdb`, then `hrt search "query" --store mem.duckdb`.
    For evaluation: `hrt run --dataset DIR --split test --out run.trec`, then `hrt eval ... --run run.trec`.
    """


def _load_cfg(config: str | None, mode: str | None):
    from .config import load_config

    if config:
        if mode:  # said, not silently dropped: the config's own retrievers decide
            click.echo(f"note: --mode {mode} is ignored: --config {config} decides which lists are searched", err=True)
        return load_config(config)
    return load_config(MODES[mode or "hybrid"])


@main.command()
@click.argument("source", type=click.Path(exists=False))
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="DuckDB store file (created if missing).")
@click.option("--chunk-size", default=None, type=click.IntRange(100), help="Max characters per chunk (default 1000).")
@click.option("--chunk-overlap", default=None, type=click.IntRange(0), help="Characters of overlap between chunks (default 150).")
@click.option("--stemmer", default=None, help="FTS stemmer, one per store: porter (English, the default), english, german, french, spanish, italian, dutch, ... (26 languages), or none.")
@click.option("--stopwords", default=None, help="FTS stopword list: english or none (default english).")
@click.option("--compounds/--no-compounds", default=None,
              help="Index (and query) compound forms of technical tokens beside the words: max_pool_size also as "
                   "`max pool size`, v2.1.0 as `v2_1_0` (default on). --no-compounds gives plain BM25 (DuckDB's "
                   "tokenizer, stemmer and stopwords only), e.g. a baseline for a paper; CJK text keeps its character "
                   "terms. One per store: changing it re-indexes every chunk; searches read it from the store.")
@click.option("--model", default=None, help="Embedding model: path or id (default: packaged all-MiniLM-L6-v2).")
@click.option("--backend", type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]), default="auto", show_default=True,
              help="Local embedding runtime: auto = ONNX Runtime when installed, else torch (same vectors); onnx-int8 is a different model.")
@click.option("--vectors", "vectors_path", default=None, type=click.Path(exists=True, dir_okay=False),
              help="Precomputed chunk vectors (Parquet/JSONL from `hrt embed`): nothing is embedded here.")
@click.option("--embed-url", default=None,
              help="OpenAI-compatible /v1/embeddings endpoint (a base URL ending in /v1 gets /embeddings appended); "
                   "--model names its model.")
@click.option("--api-key-env", default=None, help="NAME of the environment variable holding the endpoint's API key.")
@click.option("--dimensions", default=None, type=click.IntRange(1), help="Vector size to ask the endpoint for.")
@click.option("--embed-batch-size", default=None, type=click.IntRange(1, 4096),
              help="--embed-url: texts per request (as retrieval.dense.batch_size; default 32, the most TEI takes "
                   "by default).")
@click.option("--embed-timeout", default=None, type=click.FloatRange(0, 600, min_open=True),
              help="--embed-url: seconds one request may take (as retrieval.dense.timeout_s; default 30).")
@click.option("--embed-retries", default=None, type=click.IntRange(0, 10),
              help="--embed-url: retries of a failed request, with backoff (as retrieval.dense.retries; default 2).")
@click.option("--no-embed", is_flag=True, help="Skip embeddings (lexical search only).")
@click.option("--prune", is_flag=True, help="Remove stored documents that are not in SOURCE.")
@click.option("--vector-index", type=click.Choice(["none", "hnsw"]), default="none", show_default=True,
              help="Also build an HNSW index over the vectors (usearch, a file beside the store; for stores of ~100k chunks and up).")
@click.option("--text-field", default=None, help="JSONL/Parquet field holding the text (default: text, else contents).")
@click.option("--include", "include", multiple=True, metavar="GLOB",
              help="Also read files matching GLOB as text (repeatable; on the path relative to SOURCE, whatever the case): "
                   "'*.py', 'docs/*.html'.")
@click.option("--exclude", "exclude", multiple=True, metavar="GLOB",
              help="Leave out files or folders matching GLOB (repeatable; on the path relative to SOURCE, whatever the "
                   "case): 'logs/*', 'node_modules', '*.log'.")
@click.option("--id-prefix", default=None, metavar="TEXT",
              help="Put TEXT before every document id of this ingest (e.g. 'personal/'): ids are paths relative "
                   "to SOURCE, so two folders sharing a store each need their own prefix to keep both todo.md.")
@click.option("-v", "--verbose", is_flag=True, help="Name every file or record not indexed, with the reason.")
@click.option("--wait", "wait_s", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds to keep trying while another process holds the store (a write, or readers during a write).")
def ingest(source, store_path, chunk_size, chunk_overlap, stemmer, stopwords, compounds, model, backend, vectors_path, embed_url,
           api_key_env, dimensions, embed_batch_size, embed_timeout, embed_retries, no_embed, prune, vector_index,
           text_field, include, exclude, id_prefix, verbose, wait_s) -> None:
    """Load SOURCE into the store: chunk, embed (cached by model + text hash), rebuild the BM25 index.

    SOURCE is a BEIR directory (corpus.jsonl), a .jsonl or .parquet file, JSONL records on stdin (-: one memory from a
    program, no file needed, no folder recorded), one text file, or a folder of text
    files: .md, .markdown, .mdx, .txt, .text, .rst, and files without an extension (README, NEWS) whose content is UTF-8 text (source =
    relative path, scope = top folder). Any other extension (.py, .yaml, .log) is skipped, the same on every
    machine, until --include names it; --exclude leaves files or folders out; hidden files and folders are read
    only when an --include names them (.git, .hg and .svn never). A text file over 5 MB is named before embedding starts. A JSONL
    or Parquet record's top-level fields other than the id, text, title, source, scope, metadata and vector are
    stored as metadata (checked like metadata: a bad date names the line and field). Files
    and records left out (other types, binary content, empty documents) are counted; -v names each with the
    reason. Re-ingesting unchanged documents computes
    nothing; a changed document replaces its chunks and embeddings; the whole update is one transaction.

    A document's id is its path relative to SOURCE (a record's id for JSONL/Parquet): another folder's
    todo.md has the same id and replaces the stored one. The store records the folders and files ingested
    into it and warns when one replaces documents another put there; --id-prefix personal/ keeps both.

    Vectors made elsewhere: a corpus whose records carry a `vector` field (one chunk per document; name
    the model with --model), a vectors file from `hrt embed` (--vectors), or an http endpoint (--embed-url).
    A store keeps the vectors of one model: another model is refused, naming both.
    """
    from dataclasses import replace

    from .loaders import check_id_prefix, load_corpus
    from .store import IndexSettings, Store

    t0 = time.perf_counter()
    # Checked before anything is read or opened: a bad --stemmer/--stopwords is one line, and no store is made.
    IndexSettings(**{k: v for k, v in {"stemmer": stemmer, "stopwords": stopwords}.items() if v is not None})
    _note_backslashes(store_path)
    if id_prefix is not None:
        check_id_prefix(id_prefix, "--id-prefix")
    stdin = source == "-"
    if stdin:  # JSONL records from a program: one memory or a batch, without a temporary file (user trial BR)
        if prune:
            raise ToolkitError("--prune: not with records from stdin (-), which are no folder to keep the store in step with")
        source = _stdin_jsonl()
    if not Path(source).exists():  # before the store is opened (and waited for): a typo is one line at once
        raise ToolkitError(f"{source}: no such file or folder")
    root = Path(source).resolve()
    given = None
    if vectors_path:
        from .vectors import read_vectors

        given = read_vectors(vectors_path)
    elif embed_url:
        from .config import ConfigWarning, DenseConfig, cleartext_hop
        from .embed_http import TEI_MAX_BATCH

        # 32 a request unless told: the config's 64 was refused by a stock TEI server, HTTP 413 (user trial BJ)
        tuning = {k: v for k, v in (("batch_size", embed_batch_size or TEI_MAX_BATCH), ("timeout_s", embed_timeout),
                                    ("retries", embed_retries)) if v is not None}
        try:
            dense = DenseConfig(provider="http", url=embed_url, model=model or "", api_key_env=api_key_env,
                                dimensions=dimensions, **tuning)
        except ConfigError as e:  # field and message per line, never the rejected value (`config._format_errors`)
            msgs = "; ".join(line.removeprefix("DenseConfig: ") for line in str(e).splitlines())
            raise ToolkitError(f"--embed-url/--api-key-env/--model: {msgs or 'invalid'}") from None
        if api_key_env and (hop := cleartext_hop(dense.url)):  # as a config file naming this URL says (user trial BJ)
            warnings.warn(f"--embed-url: sends the value of ${api_key_env} over unencrypted http {hop}", ConfigWarning,
                          stacklevel=2)
        given = _dense_embedder(dense)
    elif embed_batch_size or embed_timeout or embed_retries is not None:
        raise ToolkitError("--embed-batch-size/--embed-timeout/--embed-retries: only with --embed-url (a local model's "
                           "batches are its own)")
    with Store(store_path, embedder=given, wait_s=wait_s) as st:
        # Read once the store is ours: two runs waiting for it (cron's, --wait) took it in no fixed order, and the one
        # that had read the folder first could write an older copy over a newer one (user trial AS).
        try:
            docs = load_corpus(source, text_field=text_field, include=include, exclude=exclude, id_prefix=id_prefix)
        except ToolkitError as e:
            if stdin:  # the lines are stdin's, not a temporary file's
                raise type(e)(str(e).replace(str(source), "stdin")) from None
            raise
        base = st.settings or IndexSettings()
        over = {k: v for k, v in {"chunk_size": chunk_size, "chunk_overlap": chunk_overlap, "stemmer": stemmer, "stopwords": stopwords,
                                  "compounds": compounds}.items() if v is not None}
        settings = replace(base, **over)
        if settings.chunk_overlap >= settings.chunk_size:
            raise ToolkitError("--chunk-overlap must be smaller than --chunk-size")
        roots = [] if stdin else st.ingest_roots()  # records from stdin are added as the Python API adds them
        others = [r for r in roots if r != str(root)]
        # Read before the ingest replaces them: the stored documents another folder or file put under this
        # ingest's ids (a store without recorded roots has none: its replaced documents get `unknown_roots`' warning).
        before = _clashing_documents(st, docs, root, others) if roots and str(root) not in roots else {}
        if prune and root.is_dir():
            _refuse_pruning_files_on_disk(st, docs, root, id_prefix)
        prunable, kept = _prunable(st, docs, root, others, id_prefix) if prune else (frozenset(), [])
        gen = st.generation()
        try:
            rep = st.ingest(docs, settings=settings, embed=not no_embed, model=None if given else model, backend=backend,
                            prune=prunable if prune else False, progress=_progress() or verbose)
        except BaseException as e:
            _interrupted_write(e, st, gen)
            if (refused := getattr(e, "refused_text", None)) is not None and (cid := _chunk_of(docs, settings, refused)):
                raise ToolkitError(f"{e}; that text is chunk {cid!r}") from None
            raise
        if vector_index == "hnsw" and not st.vector_index:  # an existing index was rebuilt by the ingest if needed
            st.build_vector_index()
        replaced = sorted(i for i, row in _document_rows(st, list(before)).items() if row != before[i][0]) if before else []
        origins = [r for r in others if any(r in before[i][1] for i in replaced)]
        unknown_roots = not roots and rep.changed > 0 and not stdin
        if not stdin:
            st.add_ingest_root(root)
        stale = [] if prune or stdin else sorted(set(st.doc_sources()["doc_id"].to_list()) - {d["doc_id"] for d in docs})
    _echo_skipped(docs, verbose)
    if replaced:  # same id, other content, put there by another folder or file: the data loss users do not see
        click.echo(_replaced_warning(replaced, root, origins), err=True)
    elif unknown_roots:  # a store from before roots were recorded: whether another folder's was replaced is unknown
        click.echo(f"warning: {rep.changed} document(s) of {root} replaced stored documents with the same ids, and this "
                   "store does not record which folders were ingested into it (an older toolkit, or the Python API, "
                   "wrote it): whether those "
                   "were earlier versions of these files or another folder's documents cannot be told; give each folder "
                   "its own --id-prefix to keep both (from now on the store records its folders)", err=True)
    if kept:  # --prune left them: another folder ingested into this store still has their files
        click.echo(f"note: --prune kept {len(kept)} stored document(s) that another folder ingested into this store still "
                   f"holds (e.g. {kept[0]!r}); give each folder its own --id-prefix", err=True)
    if stale:  # a deleted or renamed file stays searchable until pruned: say so
        also = (f"; the store also holds what was ingested from {_roots_text(others)}, which --prune would remove too"
                if others else "; --prune removes them")
        click.echo(f"note: {len(stale)} stored document(s) are not in {source} (e.g. {stale[0]!r}){also}", err=True)
    index_note = "; HNSW vector index built (a config with retrieval.dense.index: hnsw searches it)" if vector_index == "hnsw" else ""
    summary = rep.summary()
    if replaced:  # "1 changed" alone reads as an edit of the same note
        said = f"{rep.changed} changed"
        what = f"{len(replaced)} of them replacing another source's document"
        summary = summary.replace(said, f"{said} ({what})", 1) if said in summary else f"{summary}; {what}"
    click.echo(f"{summary}{index_note}; {time.perf_counter() - t0:.1f} s in all -> {store_path}")


def _stdin_jsonl() -> str:
    """stdin's bytes as a JSONL file `load_corpus` reads (its checks and messages, which then name stdin): in a
    temporary folder removed when the command ends."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="hrt-stdin-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / "stdin.jsonl"
    stream = sys.stdin.buffer if sys.stdin is not None else None
    path.write_bytes(stream.read() if stream is not None else b"")
    if not path.read_bytes().strip():
        raise ToolkitError("stdin (-): no records: give JSONL, one object per line ({\"id\": ..., \"text\": ...})")
    return str(path)


def _refuse_pruning_files_on_disk(st, docs, root: Path, id_prefix: str | None) -> None:
    """--prune removes stored documents this ingest did not read. A file still in the folder that was not
    read this time (an earlier ingest's --include left out, an --exclude added, a file now skipped) is not a
    deleted note: a re-index run without the old --include dropped all source code from search. Refused,
    before anything is removed."""
    read = {d["doc_id"] for d in docs}
    prefix = id_prefix or ""
    skipped = {sk.where: sk.reason for sk in getattr(docs, "skipped", [])}
    # An emptied file is a deleted note: a fresh ingest would not hold it either (user trial AS: one blanked page kept
    # its old text searchable, and --prune refused every later sync).
    on_disk = [i for i in st.doc_sources()["doc_id"].to_list()
               if i not in read and i.startswith(prefix) and (root / i[len(prefix):]).is_file()
               and not skipped.get(i[len(prefix):], "").startswith("empty document")]
    if on_disk:
        # A file skipped this time (now binary, undecodable) needs fixing, not the --include of another ingest (user trial AI).
        bad = [i for i in on_disk if i[len(prefix):] in skipped]
        example = bad[0] if bad else on_disk[0]
        why = f", skipped: {skipped[example[len(prefix):]]}" if bad else ""
        advice = ("fix those files, or delete them (or remove their documents with hrt delete ID)" if len(bad) == len(on_disk) else
                  "give this ingest the --include (and --exclude) of the one that added them" + (", fix the skipped files"
                  if bad else "") + ", or delete those files first")
        raise ToolkitError(
            f"--prune would remove {len(on_disk):,} stored document(s) whose files are still in {root} but were not "
            f"read this time (e.g. {example!r}{why}): {advice}; nothing was changed")


def _prunable(st, docs, root: Path, others: list[str], id_prefix: str | None) -> tuple[frozenset[str], list[str]]:
    """(the stored documents --prune may remove, those it keeps): the ones this ingest did not read, under its
    --id-prefix, except those whose file another folder ingested into the store still holds. A prefix is text, so
    `wiki/` also covers `wiki/eng/`, and a plain --prune covers every prefix: the review of user trial AS's fix
    removed another folder's documents both ways."""
    read = {d["doc_id"] for d in docs}
    prefix = id_prefix or ""
    stored = st.doc_sources().filter(pl.col("doc_id").str.starts_with(prefix))
    gone = stored.filter(~pl.col("doc_id").is_in(list(read)))
    if not others or not len(gone):
        return frozenset(gone["doc_id"].to_list()), []
    records = {r: _collection_file(Path(r)) for r in others}

    def theirs(doc_id: str, source: str) -> bool:
        # A folder's id is its prefix then its source: another prefix, and another folder holding the file
        own = doc_id.endswith(str(source)) and doc_id[: len(doc_id) - len(str(source))] == prefix
        return not own and any(_origin(Path(r), source, records[r]).is_file() for r in others if r != str(root))

    kept = sorted(i for i, src in gone.select("doc_id", "source").iter_rows() if theirs(i, src))
    return frozenset(set(gone["doc_id"].to_list()) - set(kept)), kept


def _document_rows(st, doc_ids: list[str]) -> dict[str, tuple]:
    """doc_id -> (source, scope, title, text, metadata) of the stored documents among `doc_ids`."""
    df = st.documents(doc_ids)
    return {r[0]: r[1:] for r in df.select("doc_id", "source", "scope", "title", "text", "metadata").iter_rows()}


def _clashing_documents(st, docs, root: Path, others: list[str]) -> dict[str, tuple[tuple, list[str]]]:
    """The stored documents that the ingest of `docs` from `root` would overwrite, each with the other
    roots it may have come from (as `_document_rows`, origins): an id this ingest brings, except when the
    stored document can only be the very file this ingest reads (`hrt ingest notes/`, then
    `hrt ingest notes/todo.md` after an edit)."""
    stored = _document_rows(st, [d["doc_id"] for d in docs])
    records = {r: _collection_file(Path(r)) for r in (str(root), *others)}  # once per root, not per document
    mine = {d["doc_id"]: _origin(root, d["source"], records[str(root)]) for d in docs if d["doc_id"] in stored}
    out = {}
    for i, row in stored.items():
        # The roots whose file of that name is still there (all of them when none is): a root the stored
        # document cannot have come from (no such file) does not make it another folder's.
        files = [(r, _origin(Path(r), row[0], records[r])) for r in others]
        files = [(r, f) for r, f in files if f.is_file()] or files
        origins = [r for r, f in files if f != mine[i]]
        if origins:
            out[i] = (row, origins)
    return out


def _origin(root: Path, source, collection: Path | None) -> Path:
    """The file a document ingested from `root` came from: a collection file (.jsonl, .json, .parquet), or
    a BEIR folder's corpus.jsonl, is itself the origin of every record (a record's source is its own field,
    or its id: two exports in one folder sharing an id are two origins, user trial AI); a note's source is
    its path relative to the folder (a lone file's, its parent). `collection`: `_collection_file(root)`."""
    if collection is not None:
        return collection
    return (root if root.is_dir() else root.parent) / str(source)


def _collection_file(root: Path) -> Path | None:
    """The file of records an ingest of `root` reads (itself, or a BEIR folder's corpus.jsonl), else None
    (notes)."""
    from .loaders import COLLECTION_SUFFIXES, beir_corpus

    if root.is_dir():
        return beir_corpus(root)
    return root if root.suffix.lower() in COLLECTION_SUFFIXES else None


def _roots_text(roots: list[str]) -> str:
    return roots[0] if len(roots) == 1 else "one of " + ", ".join(roots[:3]) + (" ..." if len(roots) > 3 else "")


def _replaced_warning(replaced: list[str], root: Path, others: list[str]) -> str:
    """The warning for documents of `root` that replaced, under the same id, documents another folder or
    file ingested into the store had put there."""
    collection = _collection_file(root) is not None
    ids = "ids are the records' ids" if collection else "ids are paths relative to the folder"
    name = (root.stem if collection else root.name if root.is_dir() else root.parent.name) or "mine"
    return (f"warning: {len(replaced)} document(s) of {root} replaced documents with the same id ingested from "
            f"{_roots_text(others)} (e.g. {replaced[0]!r}): {ids}. If they are updates of those documents, nothing is "
            f"wrong; if both are to be kept, give each folder or file its own --id-prefix (e.g. --id-prefix {name}/)")


def _chunk_of(docs, settings, body: str) -> str | None:
    """The id of the chunk whose embedded body (title and text) is `body`: an endpoint refused it (user trial BJ: the
    message quoted its start, and the document had to be found by hand)."""
    from .chunking import chunk_body, chunk_text

    for d in docs:
        title = d.get("title") or ""
        if body[len(title) + 1 if title else 0 :][:200] not in d["text"]:
            continue
        for c in chunk_text(d["text"], settings.chunk_size, settings.chunk_overlap) or []:
            if chunk_body(title, c.text) == body:
                return f"{d['doc_id']}#{c.ord}"
    return None


def _dense_embedder(dense):
    """The embedder a `retrieval.dense` section describes (`hrt ingest --embed-url` builds one the same way)."""
    from .embed import make_embedder

    return make_embedder(**dense.embedder_args())


def _auto_ingest_embedder(cfgs, store_path):
    """The embedder the automatic ingest of `run`, `report` and `tune` uses: the http endpoint the configs'
    `retrieval.dense` names (those with dense on; else those that embed for near-duplicate dedup), so a store
    embedded through it is brought up to date by the same endpoint. None for a local model: the store's own
    (or the default) is used, as before. Two configs naming different embedders for one store are refused."""
    using = ([c for c in cfgs if c.retrieval.dense.enabled]
             or [c for c in cfgs if c.dedup.near_duplicate_enabled])
    described: dict[tuple, tuple[str, object]] = {}
    for c in using:
        d = c.retrieval.dense
        key = ("http", d.url, d.model, d.dimensions) if d.provider == "http" else ("local",)
        described.setdefault(key, (c.name or "config", d))

    def what(key: tuple) -> str:
        return (f"http endpoint {key[1]} model {key[2]!r}" + (f" ({key[3]} dimensions)" if key[3] else "")
                if key[0] == "http" else "the local model (the store's own)")

    if len(described) > 1:
        names = "; ".join(f"{name!r}: {what(k)}" for k, (name, _) in described.items())
        raise ToolkitError(f"the configs embed with different models for one store {store_path} ({names}): "
                           "use one retrieval.dense embedder per store, or a store file per embedder")
    if not described:
        return None
    (key, (_, dense)), = described.items()
    return _dense_embedder(dense) if key[0] == "http" else None


_WAIT_OPTION = click.option(
    "--wait", "wait_s", default=None, type=click.FloatRange(0),
    help="Seconds to keep trying while another process holds the store (default: 600 for the dataset cache "
         ".hrt/<dataset>.duckdb, which parallel jobs in one folder share; 0 for a --store you name).")
CACHE_WAIT_S = 600.0  # parallel CI jobs in one folder take turns on the dataset cache instead of failing


def _wait(wait_s: float | None, cache: bool) -> float:
    return wait_s if wait_s is not None else (CACHE_WAIT_S if cache else 0.0)


def _default_store(ds) -> str:
    """The store a dataset command uses without --store: the tool's cache of the dataset, .hrt/<name>.duckdb."""
    return str(Path(".hrt") / f"{ds.name}.duckdb")


def _cache_settings(cfgs, cache: bool):
    """The index settings the dataset cache is ingested with: the stemmer, stopwords and compounds the configs name, the
    defaults for what they leave to the store (the cache was built with Porter and then refused
    `retrieval.lexical.stemmer: german`, user trial AC; and a run without a stemmer must not inherit the last
    run's). None (the store's own) for a store the user named, which is never re-indexed unasked."""
    from .store import IndexSettings

    want = {k: v for c in cfgs for k, v in (("stemmer", c.retrieval.lexical.stemmer), ("stopwords", c.retrieval.lexical.stopwords),
                                            ("compounds", c.retrieval.lexical.compounds))
            if v is not None}
    return IndexSettings(**want) if cache else None


def _note_backslashes(*paths: str | None) -> None:
    """A path with a backslash names a file with a backslash in its name here, not a folder (user trial AT:
    `--store 'out\\mem.duckdb'` from a Windows habit made `out\\mem.duckdb` in the working folder): said once."""
    if os.sep == "/":
        for p in paths:
            if p and "\\" in str(p):
                click.echo(f"note: {p} holds a backslash, which is part of the file name here, not a folder separator "
                           "(folders take /)", err=True)


def _check_out(out: str, *keep: str | None) -> None:
    """`--out` must not name a store: `hrt run --out s.duckdb` and `hrt train-fusion --out s.duckdb` replaced the
    store with a TREC file or a model, exit 0 (user trial M). Refused before any work: the store given
    (`keep`), or any existing DuckDB database."""
    _note_backslashes(out, *keep)
    if out == "-":
        return
    o = Path(out)
    for k in keep:
        if k and Path(k).exists() and (o.resolve() == Path(k).resolve() or (o.exists() and o.samefile(k))):
            raise ToolkitError(f"--out {out} is the store file {k}: writing there would replace the store; name another file")
    if o.is_file():
        from .store import DUCKDB_MAGIC

        at, magic = DUCKDB_MAGIC
        with o.open("rb") as f:
            if f.read(at + len(magic))[at:] == magic:
                raise ToolkitError(f"--out {out} is a DuckDB database (a store?): writing there would replace it; "
                                   "name another file")


def _in_sample_note(cfgs: dict, ds, split: str, qids: list[str], texts: list[str]) -> list[str]:
    """A config run on queries that chose it (`hrt tune`: `tuned_on`) or a learned config run on queries its
    model was trained on: its scores there are not results. Said on stderr per config
    (`provenance.in_sample_notes`). Returns what it said (for the HTML report)."""
    from .provenance import in_sample_notes

    said = in_sample_notes(cfgs, qids, texts, ds.name, split)
    for line in said:
        click.echo(f"warning: {line}", err=True)
    return said


def _needs_vectors(cfgs) -> bool:
    """Whether any config reads chunk vectors (dense search, near-duplicate dedup): the automatic ingest of
    `run`, `report` and `tune` embeds only then. A lexical-only report on a store embedded by an http endpoint
    was refused, because embedding new chunks there would have used the local model."""
    return any(c.retrieval.dense.enabled or c.dedup.near_duplicate_enabled for c in cfgs)


@contextlib.contextmanager
def _closing_embedder(emb):
    """Closes an http embedder's client when the command is done with it."""
    try:
        yield emb
    finally:
        close = getattr(emb, "close", None)
        if close is not None:
            close()


def _warn_judged_skipped(ds, split: str, corpus) -> str | None:
    """Judged documents the corpus file holds but reading it left out (an empty record, a field of the wrong
    type): no run can retrieve them, and `hrt run` said nothing when the store already matched the corpus (user
    trial AM). Ids missing from the corpus file are `Dataset.qrels`' warning."""
    judged = set(ds._judged(split)["doc_id"].to_list())
    lost = sorted((judged & ds.corpus_ids()) - {d["doc_id"] for d in corpus})
    if not lost:
        return None
    why = next((s.reason for s in getattr(corpus, "skipped", []) if repr(lost[0]) in s.reason), "left out when the corpus was read")
    msg = (f"{len(lost)} judged document(s) of the {split} qrels are not in the store (e.g. {lost[0]!r}: {why}); "
           "no run can retrieve them, so they count as misses")
    click.echo(f"warning: {msg}", err=True)
    return msg


def _note_store_as_corpus(st, ds, split: str) -> None:
    """With no corpus file the store is the corpus: say which judged documents it lacks (no run can find them). Query
    scopes none of its documents has (`hrt run` printed "20/33 queries" and nothing else, user trial BB) are warned
    of by `prepare`, for every caller."""
    stored = st.doc_sources()
    judged = ds.qrels(split)
    missing = judged.join(stored.select("doc_id"), on="doc_id", how="anti")["doc_id"].unique().sort()
    if len(missing):
        click.echo(f"warning: {len(missing)} judged document(s) of the {split} qrels are not in {st.path} (e.g. "
                   f"{', '.join(map(repr, missing[:3]))}): no run can retrieve them, so they count as misses", err=True)


def _echo_skipped(docs, verbose: bool = False) -> None:
    """Say what the corpus left out (count and reasons; each one with -v), on stderr."""
    skipped = getattr(docs, "skipped", [])
    if not skipped:
        return
    hint = "" if verbose else " (-v names them)"
    click.echo(f"warning: {docs.skipped_summary()}{hint}", err=True)
    if verbose:  # a hidden or excluded folder is one line, not one per file (a copied .git is thousands)
        folders: dict[tuple[str, str], int] = {}
        for s in skipped:
            if getattr(s, "folder", None):
                folders[s.folder, s.reason] = folders.get((s.folder, s.reason), 0) + 1
        for s in skipped:
            if not getattr(s, "folder", None):
                click.echo(f"  skipped {s.where}: {s.reason}", err=True)
            elif (n := folders.pop((s.folder, s.reason), None)) is not None:
                why = "hidden" if s.reason == "hidden file or folder" else s.reason
                click.echo(f"  skipped folder {s.folder} ({why}): {n} file{'s' if n != 1 else ''}", err=True)


@main.command()
@click.argument("source", type=click.Path(exists=True))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Vectors file to write (.parquet, or .jsonl).")
@click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="local: this process; ray: a Ray Data pipeline (actors holding the model) on a local Ray or a cluster.")
@click.option("--ray-address", default=None, help="Ray cluster to use (e.g. auto, ray://head:10001; default: RAY_ADDRESS, else a local Ray).")
@click.option("--actors", default=2, show_default=True, type=click.IntRange(1), help="Embedding actors (model copies) for --engine ray.")
@click.option("--model", default=None, help="Embedding model: path or id (default: packaged all-MiniLM-L6-v2).")
@click.option("--backend", type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]), default="auto", show_default=True)
@click.option("--chunk-size", default=1000, show_default=True, type=click.IntRange(100), help="As `hrt ingest` will chunk.")
@click.option("--chunk-overlap", default=150, show_default=True, type=click.IntRange(0), help="As `hrt ingest` will chunk.")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(1))
@click.option("--text-field", default=None, help="JSONL/Parquet field holding the text (default: text, else contents).")
@click.option("--include", "include", multiple=True, metavar="GLOB", help="As `hrt ingest --include`.")
@click.option("--exclude", "exclude", multiple=True, metavar="GLOB", help="As `hrt ingest --exclude` (give both the same).")
def embed(source, out, engine, ray_address, actors, model, backend, chunk_size, chunk_overlap, batch_size, text_field,
          include, exclude) -> None:
    """Chunk SOURCE and embed its chunks into a vectors file for `hrt ingest SOURCE --vectors OUT`.

    With --engine ray the embedding runs as a Ray Data pipeline, so a cluster embeds and one machine keeps
    the store. Use the same --chunk-size/--chunk-overlap as the ingest (a chunk without a vector is an error).
    """
    import os

    from .embed_corpus import embed_corpus
    from .loaders import load_corpus

    _check_out(out)

    if chunk_overlap >= chunk_size:
        raise ToolkitError("--chunk-overlap must be smaller than --chunk-size")
    t0 = time.perf_counter()
    docs = load_corpus(source, text_field=text_field, include=include, exclude=exclude)
    path, frame = embed_corpus(docs, out, engine=engine, model=model, backend=backend, chunk_size=chunk_size,
                               chunk_overlap=chunk_overlap, batch_size=batch_size, actors=actors,
                               address=ray_address or os.environ.get("RAY_ADDRESS"))
    click.echo(f"{len(docs)} documents, {len(frame)} chunks embedded with {frame['model'][0]} ({engine}) in "
               f"{time.perf_counter() - t0:.1f} s -> {path}")


@main.command()
@click.argument("query")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
@click.option("--mode", type=click.Choice(list(MODES)), default=None, help="lexical (BM25), dense (cosine) or hybrid (the `default` preset). Default hybrid.")
@click.option("--config", default=None, help="Pipeline config (YAML/JSON path or preset name); overrides --mode.")
@click.option("-n", "n", default=5, show_default=True, type=click.IntRange(1, 1000), help="Number of results.")
@click.option("--scope", default=None, help="Only documents whose scope equals this.")
@click.option("--where", "where", multiple=True, metavar="FIELD=VALUE", callback=lambda ctx, param, v: _where(v),
              help="Only documents whose metadata FIELD equals VALUE (repeatable, all must hold): the same text after "
                   "Unicode NFC, or the same number for a field stored as a JSON number; a dot names a nested field "
                   "(ctx.app). Adds to the config's retrieval.filters.")
@click.option("--format", "fmt", type=click.Choice(["compact", "detailed", "json"]), default=None, help="Output format (default from config: compact).")
@click.option("--max-chars", "max_chars", type=click.IntRange(200, 1_000_000), default=None,
              help="Characters the compact or detailed output may take (default from config: output.max_chars, 2,000): "
                   "compact shortens its excerpts and shows fewer results to fit, detailed falls back to compact above it; "
                   "JSON and --batch are not cut.")
@click.option("--backend", type=click.Choice(["auto", "torch", "onnx", "onnx-int8"]), default=None,
              help="Query embedding runtime (default from config: auto = ONNX Runtime when installed, else torch).")
@click.option("--as-of", "as_of", default=None, metavar="DATE", callback=lambda ctx, param, v: _iso_date(v),
              help="The query's date (ISO: 2024-05-01, 2024-05-01T09:30:00Z): recency priors measure age from it, "
                   "not from now (sets the query field named by the config's priors.recency_query_field).")
@click.option("-v", "--verbose", is_flag=True, help="Say on stderr where the reranker settings came from (config file or "
              "HRT_RERANK_* environment), and which way the query went (its route: which list the results follow under `default`, the dense weight under `guarded-rrf`).")
@click.option("--wait", "wait_s", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds to keep trying while another process writes to the store.")
@click.option("--batch", is_flag=True,
              help="Serve many queries from one process: QUERY is -, each stdin line a JSON request ({\"query\": ..., "
                   "\"qid\", \"where\", \"scope\", \"as_of\", \"n\"}), each answered by one line of JSON on stdout as it "
                   "is read (docs/output.md).")
@_cycle_collector_paused()
def search(query, store_path, mode, config, n, scope, where, fmt, max_chars, backend, as_of, verbose, wait_s, batch) -> None:
    """Search the store with one query and print the results (compact: 5 results in at most 2,000 chars).

    Each result shows its final score and where it came from (each list's rank and score), the memory
    priors' factors when the config has priors, and flags in words (exact token kept, also in N sources,
    reranked). `--format json` is documented in docs/output.md. Warnings on stderr: a --scope no document
    has, a store only partly embedded (dense search), a CJK query on a store indexed before CJK words were.

    With no reranker in the config, HRT_RERANK_PROVIDER / _MODEL / _BASE_URL / _API_KEY_ENV (or agent-memory's
    AGENT_MEMORY_RERANK_* names) switch one on; a config that names a provider wins. HRT_RERANK_TIMEOUT
    (seconds per request, default 10) and HRT_RERANK_RETRIES (default 2) bound how long a failing or hanging
    endpoint can stall a search: a query's requests, retries and pauses end within timeout x (batches + retries),
    then the search keeps its retrieval order; e.g. HRT_RERANK_TIMEOUT=2 HRT_RERANK_RETRIES=0.

    Text from a program (an agent's question, anything that may start with "-"): QUERY `-` reads it from
    stdin (`printf %s "$Q" | hrt search - --store S`), or put it after `--` (`hrt search --store S -- "-v flag"`).
    An empty --scope ("$SCOPE" unset) means no scope. Exit codes: README, "Exit codes".
    """
    global _EXIT_AT_ONCE
    _EXIT_AT_ONCE = _PROGRAM
    _own_provider_lines()
    from .render import origins, render
    from .rerank_env import resolve_rerank

    _need_stdout()
    if batch and query != "-":
        raise ToolkitError("--batch reads its queries from stdin: give QUERY as - (hrt search - --batch --store S)")
    if batch and fmt not in (None, "json"):
        raise ToolkitError(f"--batch answers in JSON lines: --format {fmt} cannot be one")
    if query == "-" and not batch:  # stdin: any text, whatever it starts with
        if sys.stdin is None:
            raise ToolkitError("the query is '-' (read it from stdin), but stdin is closed")
        query = sys.stdin.read().strip().removeprefix("\ufeff").strip()  # a Windows editor's BOM is not part of it
    scope = scope or None  # --scope "" is an unset variable, not the scope ''
    if not batch and not query.strip():
        raise ToolkitError("the query is empty")
    cfg, rr_source = resolve_rerank(_load_cfg(config, mode).with_updates({"output.n": n}))
    if backend:
        cfg = cfg.with_updates({"retrieval.dense.backend": backend})
    if max_chars:
        cfg = cfg.with_updates({"output.max_chars": max_chars})
    if where:
        cfg = _with_where(cfg, where)
    if not cfg.retrieval.dense.enabled:  # the config first: it decides how numpy is imported
        _numpy_with_one_blas_thread()
    from .analysis import ANALYSIS_VERSION
    from .pipeline import prepare, rescore
    from .store import StaleTextWarning, Store, bind_without_pandas, duckdb_threads

    bind_without_pandas()
    if verbose:
        click.echo(rr_source.describe(cfg), err=True)
    # Unchecked only in a process of its own: DuckDB refuses a second connection to the file with other settings,
    # and a notebook or a test holding the store open searched it in-process (the review).
    with Store(store_path, read_only=True, wait_s=wait_s, verify_extension=not _PROGRAM) as st:
        if _PROGRAM and st.con.small and duckdb_threads() is None:
            # One DuckDB thread (unless HRT_DUCKDB_THREADS says otherwise) for a small store: a search's statements read
            # a row group or a few, which one thread does as fast, and the other threads only cost their hand-offs (~5 ms
            # of CPU in a cold lexical search). Only in a program: other Stores on the file in a host's process share it.
            st.con.execute("SET threads = 1")
        if cfg.retrieval.dense.enabled:
            embedded, chunks = st.embedding_coverage()
            if not embedded and chunks and config is None and mode is None:
                # The default (hybrid) on a store ingested with --no-embed: BM25 alone, said, not an error.
                click.echo("note: the store has no embeddings (ingested with --no-embed): searching with BM25 alone "
                           "(--mode lexical); `hrt ingest` without --no-embed adds dense search", err=True)
                cfg, _ = resolve_rerank(_load_cfg(None, "lexical").with_updates({"output.n": n}))
            _warn_dense_coverage(embedded, chunks)

        def answer(query: str, scope: str | None, as_of: str | None, cfg, n: int, fmt: str) -> str:
            """One query's results, rendered; notes on stderr."""
            q = pl.DataFrame({"qid": ["q"], "text": [query], "scope": [scope], "metadata": [json.dumps(_as_of_metadata(cfg, as_of))]},
                             schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8, "metadata": pl.Utf8})
            with warnings.catch_warnings():  # the stale-text warning: said below, with this query in mind
                warnings.simplefilter("ignore", StaleTextWarning)
                prep = prepare(st, q, cfg, one_shot=True)  # the stage cache key holds the query's metadata (its date)
            res = rescore(prep, cfg)
            top = res.shown()  # output.n is n
            filter_note = None
            if not len(top):  # a bare "no results" says nothing: why, when it can be told
                if cfg.retrieval.filters:  # said with the results (JSON `messages` too), below
                    filter_note = _filter_note(st.filter_counts(cfg.retrieval.filters))
                if scope is not None:
                    _note_unknown_scope(st.doc_sources(), st.stored_form("scope", scope))
                elif filter_note is None and not st.doc_sources().height:  # (a store emptied by `hrt delete`: trial AY)
                    click.echo(f"note: {store_path} holds no documents (`hrt ingest` adds them)", err=True)
                elif filter_note is None and not res.per_query.is_empty() and res.per_query["no_term_match"][0] and (
                        st.lexical_analysis == ANALYSIS_VERSION):  # (else the older analysis is the reason, said below)
                    # A lexical search for stopwords or symbols said a bare "no results" (user trial AY).
                    click.echo("note: BM25 found no document holding any of the query's indexed words (stopwords and "
                               "symbols are not indexed)", err=True)
            _note_short_lists(cfg, n, len(top))
            if cfg.retrieval.lexical.enabled:
                _note_ambiguous_hashes(st, query, scope, cfg.retrieval.filters)
            if cfg.retrieval.lexical.enabled:
                _note_old_analysis(query, prep, st, lexical_only=not cfg.retrieval.dense.enabled)
            docs = st.documents(top["doc_id"].to_list()).select("doc_id", "title", "text", "metadata")
            chunks = st.chunks(top["chunk_id"].to_list()).select("chunk_id", "start_char", pl.col("text").alias("excerpt"))
            rows = (
                top.join(docs, on="doc_id", how="left")
                .join(chunks, on="chunk_id", how="left")
                .join(origins(prep.candidates, top, cfg.fusion), on=["qid", "doc_id"], how="left")
                .sort("rank")
            )
            notes = res.per_query.to_dicts()[0] if len(res.per_query) else {}
            if verbose and not batch:  # the route, whatever the format prints (user trial CA looked for it under -v)
                from .render import route_lines

                for line in route_lines(notes):
                    click.echo(line, err=True)
            if filter_note:  # the filter left nothing, not the query's words (user trial BR: no_term_match said so)
                notes["messages"] = [*(notes.get("messages") or []), filter_note]
                notes["no_term_match"] = False
            return render(rows, notes=notes, fmt=fmt, max_chars=cfg.output.max_chars,
                          excerpt_chars=cfg.output.excerpt_chars, query=query)

        from . import interrupts

        if batch:
            _answer_lines(answer, cfg, scope, as_of, n)
            return
        out = answer(query, scope, as_of, cfg, n, fmt or cfg.output.format)
    interrupts.check()  # cancelled is cancelled: no results after a Ctrl-C a library swallowed
    _echo_whole(_json_for_stdout(out, indent=2) if (fmt or cfg.output.format) == "json" else out)


def _answer_lines(answer, cfg, scope: str | None, as_of: str | None, n: int) -> None:
    """`hrt search - --batch`: one JSON request a line on stdin, one JSON answer a line on stdout, written as each
    request is read, so one process serves a program's queries for as long as it keeps stdin open (user trial BR: a
    process per query cost 1.5-3 s and 160-345 MB each). A request: {"query": ..., "qid"?, "scope"?, "where"?: {field:
    value}, "as_of"?, "n"?}; the answer is the --format json object with the request's `qid` first, or {"qid", "error"}
    for a request that cannot be answered (the process goes on)."""
    from . import interrupts
    from .config import filter_value

    for lineno, line in enumerate(sys.stdin, start=1):
        if not line.strip():
            continue
        qid: object = lineno
        try:
            req = json.loads(line.removeprefix("\ufeff"))
            if not isinstance(req, dict):
                raise ToolkitError("a request is a JSON object: {\"query\": ...}")
            qid = req.get("qid", lineno)
            query = req.get("query")
            if not isinstance(query, str) or not query.strip():
                raise ToolkitError("\"query\": the query text (a non-empty string)")
            wanted = req.get("n", n)
            if isinstance(wanted, bool) or not isinstance(wanted, int) or not 1 <= wanted <= 1000:
                raise ToolkitError(f"\"n\": a number of results from 1 to 1000, got {wanted!r}")
            where = req.get("where") or {}
            if not isinstance(where, dict):
                raise ToolkitError("\"where\": an object of metadata field -> value")
            try:  # JSON's numbers and true/false as the config reads them
                where = {str(k): filter_value(str(k), v) for k, v in where.items()}
            except ValueError as e:
                raise ToolkitError(f"\"where\": {e}") from None
            one = cfg.with_updates({"output.n": wanted})
            if where:
                one = _with_where(one, where)
            when = req.get("as_of", as_of)
            if when is not None:
                _iso_date_or_error(when)
            doc = json.loads(answer(query, req.get("scope", scope) or None, when, one, wanted, "json"))
            out = {"qid": qid, **doc}
        except json.JSONDecodeError as e:
            out = {"qid": qid, "error": f"stdin:{lineno}: malformed JSON ({e.msg} at column {e.colno})"}
        except ToolkitError as e:
            out = {"qid": qid, "error": f"stdin:{lineno}: {e}"}
        interrupts.check()
        _echo_whole(_json_for_stdout(json.dumps(out, ensure_ascii=False)))


def _json_for_stdout(text: str, indent: int | None = None) -> str:
    """JSON text stdout's encoding can write: as it is in UTF-8, else with every non-ASCII character escaped (\\u2026),
    which JSON reads back as the same text. PYTHONIOENCODING=latin-1 made a JSON search fail on the first "…" of a
    snippet (user trial BR); text formats still fail there rather than show altered text."""
    enc = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(enc)
        return text
    except UnicodeEncodeError:
        return json.dumps(json.loads(text), ensure_ascii=True, indent=indent)
    except LookupError:
        return text


def _iso_date_or_error(value: object) -> None:
    if not isinstance(value, str):
        raise ToolkitError(f"\"as_of\": an ISO date or datetime, got {value!r}")
    try:
        _iso_date(value)
    except click.BadParameter as e:
        raise ToolkitError(f"\"as_of\": {e.message}") from None


def _note_ambiguous_hashes(st, query: str, scope: str | None, filters: dict | None) -> None:
    """A short hash in the query that starts several stored ids names none of them (`Store.named_documents`): say so and
    which, rather than leave a search for "commit abc1234" to read as a bad retriever (review CB). Only for tokens
    `named_documents` itself named nothing for (an id equal to the token is what it names)."""
    from .guard import id_tokens, short_hash

    toks = [t for t in id_tokens(query) if short_hash(t)]
    if not toks:
        return
    asks = pl.DataFrame({"qid": toks, "token": toks, "scope": [scope] * len(toks), "short": [True] * len(toks)},
                        schema={"qid": pl.Utf8, "token": pl.Utf8, "scope": pl.Utf8, "short": pl.Boolean})
    named = set(st.named_documents(asks, filters)["token"].to_list())
    for tok in (t for t in toks if t not in named):
        ids = st.ids_starting(tok, scope=scope, limit=3)
        if len(ids) > 1:
            more = ", ".join(ids[:2]) + (", ..." if len(ids) > 2 else "")
            click.echo(f"note: {tok} starts {'3 or more' if len(ids) > 2 else 'two'} stored ids ({more}), so it names "
                       "none of them: give more of the hash", err=True)


def _note_short_lists(cfg, n: int, got: int) -> None:
    """Fewer results than `-n` because the retrieval lists are shorter than that: said, with the field to raise
    (user trial AY: `top_k: 1` and `-n 3` gave one result without a word; `hrt run` says it of its depth)."""
    ks = [lst.top_k for lst in (cfg.retrieval.lexical, cfg.retrieval.dense) if lst.enabled]
    if ks and got < n and max(ks) < n:
        click.echo(f"note: {got} result(s) of the {n} asked: the retrieval lists stop at top_k {max(ks)} "
                   "(retrieval.lexical.top_k / retrieval.dense.top_k)", err=True)


def _where(values: tuple[str, ...]) -> dict[str, str]:
    """`--where FIELD=VALUE` options as a filters mapping; a malformed one names the option."""
    from .config import FILTER_KEY_RULE, filter_key_ok, filter_values_equal

    out: dict[str, str] = {}
    for v in values:
        key, eq, value = v.partition("=")
        key = key.strip()
        if not eq or not filter_key_ok(key):
            raise click.BadParameter(f"{v!r}: expected FIELD=VALUE, where FIELD is {FILTER_KEY_RULE} (e.g. --where "
                                     "user=ana)", param_hint="'--where'")
        if key in out and not filter_values_equal(out[key], value):
            raise click.BadParameter(f"{key}={out[key]!r} and {key}={value!r}: a field holds one value, so both cannot "
                                     "hold (every --where must)", param_hint="'--where'")
        out[key] = value
    return out


def _filter_note(counts: dict[str, tuple[int, int]]) -> str:
    """Why a filtered search found nothing, from `Store.filter_counts` (user trial BK: a mistyped field or value was
    reported as if the query's words had matched nothing)."""
    for k, (has, equal) in counts.items():
        if not has:
            return f"no stored document has a metadata field {k!r} (--where / retrieval.filters)"
        if not equal:
            # (no count: with tenants in one store it would tell one of the others' documents)
            return (f"stored documents have the metadata field {k!r}, none with the filter's value (values are compared "
                    "exactly, after Unicode NFC, or as numbers)")
    return "no result among the documents that pass every filter (--where / retrieval.filters)"


def _with_where(cfg, where: dict[str, str]):
    """`cfg` with the `--where` filters added to its own. One on a field the config already filters to another value
    is refused: it would replace the config's (user trial BK: a config pinning `user: ana` searched bob's memories
    given `--where user=bob`), and both cannot hold."""
    from .config import filter_values_equal

    pinned = cfg.retrieval.filters
    if clash := [k for k, v in where.items() if k in pinned and not filter_values_equal(pinned[k], v)]:
        raise ToolkitError("; ".join(f"--where {k}={where[k]} and the config's retrieval.filters {k}: {pinned[k]!r}"
                                     for k in clash) + ": a field holds one value, so both cannot hold")
    return cfg.with_updates({"retrieval.filters": {**pinned, **where}})


def _iso_date(value: str | None) -> str | None:
    """`--as-of`: an ISO date or datetime, checked here so a typo names the option, not the query metadata."""
    if value is None:
        return None
    from datetime import datetime

    try:
        datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO date or datetime (e.g. 2024-05-01, 2024-05-01T09:30:00Z)",
                                 param_hint="'--as-of'") from None
    return value.strip()


def _as_of_used(cfg) -> bool:
    """Whether `--as-of` can change anything (a recency prior); says so on stderr when not."""
    if cfg.priors.recency_field is None:
        click.echo(f"note: --as-of has no effect: config {cfg.name!r} has no recency prior (priors.recency_field)", err=True)
        return False
    return True


def _pin_clock(cfg, label: str | None = None) -> tuple[object, str | None]:
    """(`cfg` with `priors.as_of` set to now, a note saying so) when its recency prior would read the clock: a run
    or report of it is then reproducible from what it printed (user trial AL: the same run on another day ranked 23
    of 33 queries otherwise, and nothing said which time it used)."""
    if cfg.priors.recency_field is None or cfg.priors.as_of is not None:
        return cfg, None
    from datetime import UTC, datetime

    now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    who = f"{label}: " if label else ""
    return (cfg.with_updates({"priors.as_of": now}),
            f"{who}the recency prior measures age from {now} for queries without a date (--as-of {now} repeats it)")


def _as_of_metadata(cfg, as_of: str | None) -> dict[str, str]:
    """The query's metadata for `--as-of`: its date under the field the recency prior reads as the query's
    date (`priors.recency_query_field`), as the Python API takes it from query metadata."""
    if as_of is None:
        return {}
    from .metatypes import is_date_field

    field_ = cfg.priors.recency_query_field
    if _as_of_used(cfg) and not is_date_field(field_):  # the query's value would be kept as text, and age measured from now
        raise ToolkitError(f"--as-of: priors.recency_query_field {field_!r} is not read as a date (a date field is named "
                           "date, datetime, timestamp, created, updated, modified or ends in _at, _date, _time)")
    return {field_: as_of}


def _warn_dense_coverage(embedded: int, chunks: int) -> None:
    """Dense search ranks embedded chunks only: on a partly embedded store hybrid lists are skewed towards
    what BM25 finds, silently. (No embeddings at all is the store's own error.)"""
    if 0 < embedded < chunks:
        click.echo(f"warning: dense search covers {embedded:,} of {chunks:,} chunks: the rest were ingested with "
                   "--no-embed and only BM25 can find them; `hrt ingest` without --no-embed embeds them", err=True)


def _note_unknown_scope(doc_sources: pl.DataFrame, scope: str) -> None:
    """`--scope` that no document has: say so, and which scopes exist, instead of a bare "no results"."""
    if (doc_sources["scope"] == scope).any():
        return
    counts = doc_sources.filter(pl.col("scope").is_not_null()).group_by("scope").len().sort("scope")
    if not len(counts):
        click.echo(f"note: no stored document has scope {scope!r}: this store's documents have no scope (a folder "
                   "ingest takes each file's top folder as its scope; JSONL records a `scope` field)", err=True)
        return
    shown = ", ".join(f"{s} ({c:,} document{'s' if c != 1 else ''})" for s, c in counts.head(10).iter_rows())
    more = f", and {len(counts) - 10:,} more" if len(counts) > 10 else ""
    click.echo(f"note: no stored document has scope {scope!r}; the store has {len(counts):,} scope"
               f"{'s' if len(counts) != 1 else ''}: {shown}{more}", err=True)


def _note_old_analysis(query: str, prep, store, *, lexical_only: bool) -> None:
    """A store whose BM25 text an older toolkit made (before CJK characters and pairs, NFKC and kana voicing,
    `analysis.ANALYSIS_VERSION`; or written since by an older version) can miss words in its non-ASCII chunks
    that the current analysis finds, for an ASCII query too (ＥＣＯＮＮＲＥＳＥＴ in full width, user trial W):
    said on every search until an ingest redoes them, rather than a silent miss or a bare "no results". The chunks
    are scanned for such text only up to `STALE_SCAN_MAX_CHUNKS` (a quarter second per search of a 60k-chunk store,
    review of trial W's fix); a larger old store is told it may miss words without the scan."""
    from .analysis import ANALYSIS_VERSION
    from .store import STALE_SCAN_MAX_CHUNKS

    if store.lexical_analysis == ANALYSIS_VERSION:
        return
    # A small store is scanned for the text the newer analysis indexes otherwise: an ASCII-only one said on every
    # search that it "may miss words" while `hrt info` called its text current (user trial AW).
    if not store.stale_text(scan_max_chunks=STALE_SCAN_MAX_CHUNKS):
        return
    what, redo = store.stale_text_words()
    routed = bool(prep.features["skip_lexical"].any())
    if not query.isascii() and not routed and not (prep.candidates["retriever"] == "lex").any():
        dense = "use --mode hybrid or dense, which match by meaning" if lexical_only else "the results come from dense search alone"
        click.echo(f"note: BM25 matched nothing: {what}; {redo}; {dense}", err=True)
    else:
        click.echo(f"note: BM25 may miss words in this store's non-ASCII text, if it has any: {what}; {redo}", err=True)


@main.command()
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory.")
@click.option("--split", default="test", show_default=True, help="Qrels split whose queries are run.")
@click.option("--mode", type=click.Choice(list(MODES)), default=None, help="lexical, dense or hybrid (ignored with --config).")
@click.option("--config", default=None, help="Pipeline config: YAML/JSON path or preset name (see `hrt presets`).")
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False),
              help="Store file (default .hrt/<dataset>.duckdb, kept in step with the dataset); the corpus is ingested into it. "
                   "One holding documents the dataset lacks is refused unless --prune.")
@click.option("--prune", is_flag=True, help="Remove documents the dataset lacks from the --store given (the default store always is).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="TREC run file to write (`-`: stdout).")
@click.option("--depth", default=100, show_default=True, type=click.IntRange(1), help="Results kept per query in the run.")
@click.option("--tag", default=None, help="Run tag (default: config name).")
@click.option("--as-of", "as_of", default=None, metavar="DATE", callback=lambda ctx, param, v: _iso_date(v),
              help="Reference time of the recency prior for queries without a date (ISO date or date-time, UTC; "
                   "default: the config's priors.as_of, else now). A lab export names the time its numbers were for.")
@_WAIT_OPTION
@click.option("--require-providers", is_flag=True,
              help="Exit 2 and write no run when a reranker or expansion provider fell back to the local order on any "
                   "query (CI: an endpoint outage is no result). Without it such a run's tag ends in +fallback.")
def run(dataset, split, mode, config, store_path, prune, out, depth, tag, as_of, wait_s, require_providers) -> None:
    """Run a pipeline over a dataset's queries and write a TREC run (qid Q0 docid rank score tag).

    The corpus is ingested into the store first (a no-op when unchanged); a dataset folder of judged queries
    without corpus.jsonl searches the --store as it is (documents ingested from a folder of notes). The default
    store is the dataset's cache: documents deleted from the dataset are removed from it. A --store you name may hold other documents:
    they would be retrieved and scored, so the run stops unless --prune (which removes them). Queries with
    `metadata.scope` only see documents of that scope.
    """
    _own_provider_lines()
    from .loaders import Dataset, load_corpus
    from .pipeline import run_pipeline
    from .rerank_env import resolve_rerank
    from .runs import check_tag, check_trec_ids, write_run
    from .store import Store

    ds = Dataset.open(dataset, corpus=store_path is None)  # judged queries alone do, given a --store to search
    _check_out(out, store_path or _default_store(ds))
    if out == "-":
        _need_stdout()
    cfg, rr_source = resolve_rerank(_load_cfg(config, mode))
    if as_of is not None and _as_of_used(cfg):
        cfg = cfg.with_updates({"priors.as_of": as_of})
    cfg, clock = _pin_clock(cfg)
    if clock:
        click.echo(f"note: {clock}", err=True)
    cfg = _deep_enough(cfg, depth)
    # Before any work: a bad name must not cost a whole run. A config name with spaces gives a dashed tag.
    tag = check_tag(tag or re.sub(r"\s+", "-", (cfg.name or "hrt").strip()) or "hrt")
    if rr_source.source == "environment":
        click.echo(rr_source.describe(cfg), err=True)
    cache = store_path is None
    prune = prune or cache  # the default store is the tool's cache of the dataset: kept in step
    store_path = store_path or _default_store(ds)
    queries = ds.queries(split)
    _in_sample_note({cfg.name or "config": cfg}, ds, split, queries["qid"].to_list(), queries["text"].to_list())
    check_trec_ids(queries["qid"], "query", ds.root / "queries.jsonl")  # a TREC file cannot hold them
    corpus = None
    if ds.has_corpus:
        corpus = load_corpus(ds.root)
        _warn_judged_skipped(ds, split, corpus)
        check_trec_ids(pl.Series([d["doc_id"] for d in corpus]), "document", ds.root)
    elif prune:
        raise InputError(f"{ds.root} has no corpus.jsonl: the store's documents are the corpus, and --prune has nothing "
                         "to keep them in step with")
    elif not Path(store_path).expanduser().exists():
        from .store import no_such_store

        raise no_such_store(store_path)
    t0 = time.perf_counter()
    with _closing_embedder(_auto_ingest_embedder([cfg], store_path)) as emb, \
            Store(store_path, embedder=emb, wait_s=_wait(wait_s, cache)) as st:
        if corpus is None:  # a store ingested from a folder, judged queries beside it (user trial BB)
            _note_store_as_corpus(st, ds, split)
        elif not prune:  # never delete a user's documents unasked, nor retrieve them as the dataset's
            extra = sorted(set(st.doc_sources()["doc_id"].to_list()) - {d["doc_id"] for d in corpus})
            if extra:
                raise ToolkitError(
                    f"{store_path} holds {len(extra)} document(s) not in {ds.root} (e.g. {', '.join(map(repr, extra[:3]))}): "
                    "they would be retrieved and scored; add --prune to remove them from the store, or use a store of "
                    "the dataset's own (omit --store)")
        if corpus is not None:
            rep = st.ingest(corpus, settings=_cache_settings([cfg], cache), embed=_needs_vectors([cfg]), prune=prune,
                            progress=_progress())
            if rep.added or rep.changed or rep.removed:
                _echo_skipped(corpus)
                click.echo(rep.summary(), err=True)
        res = run_pipeline(st, queries, cfg, progress=_progress())
    # `Result.run`, not `final`: the collapsed byte-identical copies are listed after their result, so the
    # file holds what `experiment`, the lab, the tuner and reports score (judgements are per document id).
    final = res.run(depth)
    from .providers import summary

    if (providers := summary(res.per_query)) != "ok":
        # The same tag and exit 0 whether the reranker answered or not (user trial BB): the file itself says so now.
        if require_providers:
            raise ToolkitError(f"providers: {providers}; no run written (--require-providers)")
        tag = f"{tag}+fallback"
    if out == "-":  # the run on stdout, for a pipe; everything else stays on stderr
        from . import interrupts
        from .runs import run_text

        interrupts.check()
        click.echo(run_text(final, tag=tag), nl=False)
    else:
        write_run(final, out, tag=tag)
    took = time.perf_counter() - t0
    from .threshold import unmet_note

    if note := unmet_note(res.per_query, cfg.threshold):
        click.echo(f"note: {note}", err=True)
    click.echo(f"{cfg.name}: {final['qid'].n_unique()}/{len(queries)} queries, {len(final)} results in {took:.1f}s; "
               f"providers: {providers} -> {'stdout' if out == '-' else out}", err=True)


def _deep_enough(cfg, depth: int):
    """The config with `output.n` raised to the run's `--depth`: the final lists stopped at output.n (100), so
    `--depth 1000` wrote 100 results per query without a word, and R@1000 and MAP were measured on a shallow run
    (user trial AU). Retrieval lists shorter than the depth bound the run too: said, with the fields to raise."""
    from .config import OUTPUT_N_MAX

    if depth > OUTPUT_N_MAX:
        click.echo(f"note: --depth {depth}: a query keeps at most {OUTPUT_N_MAX} results (output.n's limit); the run "
                   f"holds up to {OUTPUT_N_MAX} per query", err=True)
        depth = OUTPUT_N_MAX
    if depth > cfg.output.n:
        cfg = cfg.with_updates({"output.n": depth})
    r = cfg.retrieval
    short = [f"retrieval.{name}.top_k = {lst.top_k}" for name, lst in (("lexical", r.lexical), ("dense", r.dense))
             if lst.enabled and lst.top_k < depth]
    if short and all(lst.top_k < depth for lst in (r.lexical, r.dense) if lst.enabled):
        click.echo(f"note: --depth {depth}: each query's results come from lists of at most "
                   f"{' and '.join(short)} documents, so a query may get fewer than {depth}; raise them in the config "
                   "for a deeper run", err=True)
    return cfg


def _plain_table(df: pl.DataFrame) -> str:
    """Every row and column of `df` in `hrt eval`'s own layout: columns two spaces apart, numbers right-aligned
    with 4 decimals, no borders or dtype row. polars' print cut a table to 10 rows and ~8 columns with '…', and
    its dump (box drawing, 6 decimals, 342-character lines) was noise to a screen reader, wrapped in a narrow
    terminal and could not be written to an ASCII or latin-1 output at all (user trial BC). Columns beyond the
    terminal's width continue in a further block under the first column again."""
    import shutil

    from .terminal import display_width, ljust

    def cell(v: object) -> str:
        return "" if v is None else f"{v:.4f}" if isinstance(v, float) else str(v)

    cols = [[c, *(cell(v) for v in df[c].to_list())] for c in df.columns]
    right = [df[c].dtype.is_numeric() for c in df.columns]
    widths = [max(display_width(t) for t in col) for col in cols]
    room = shutil.get_terminal_size().columns
    blocks: list[list[int]] = []
    for i in range(1, len(cols)):  # the first column (a name, a qid) starts every block
        if blocks and sum(widths[j] + 2 for j in [0, *blocks[-1], i]) - 2 <= room:
            blocks[-1].append(i)
        else:
            blocks.append([i])

    def line(r: int, idx: list[int]) -> str:
        return "  ".join(" " * (widths[j] - display_width(cols[j][r])) + cols[j][r] if right[j]
                         else ljust(cols[j][r], widths[j]) for j in idx).rstrip()

    return "\n\n".join("\n".join(line(r, [0, *block]) for r in range(len(df) + 1)) for block in blocks or [[]])


JUDGED = "Judged@10"
SHALLOW_JUDGED = 0.5  # below this share of judged documents in the top 10 `hrt eval` says the values are lower bounds


def _distinct_runs(run_paths: tuple[str, ...]) -> None:
    """The same file given twice would be compared with itself (an empty significance block, user trial AM)."""
    seen: dict[Path, str] = {}
    for rp in run_paths:
        key = Path(rp).resolve()
        if key in seen:
            raise ToolkitError(f"--run {rp!r} is the same file as --run {seen[key]!r}: give each run once")
        seen[key] = rp


def _baseline_run(baseline: str | None, run_paths: tuple[str, ...]) -> str:
    """The --run that --baseline names, as the same file (`./runs/x.trec` is `runs/x.trec`), not the same string."""
    if baseline is None:
        return run_paths[0]
    hit = [rp for rp in run_paths if Path(rp).resolve() == Path(baseline).resolve()]
    if not hit:
        raise ToolkitError(f"--baseline {baseline!r} is not one of the --run files ({', '.join(run_paths)})")
    return hit[0]


def _own_provider_lines() -> None:
    """For a command that prints its providers' fallbacks itself (search, run, report): the library's
    `ProviderFallbackWarning` would say it twice. tune and the trainers show it (inside `_config_warnings`)."""
    from .providers import ProviderFallbackWarning

    warnings.filterwarnings("ignore", category=ProviderFallbackWarning)


def _conflict_notes(conflicts: dict[str, int], ties: str) -> list[str]:
    other = "rank" if ties == "trec" else "trec"
    return [f"{rp}: in {n} queries the rank column and the float32 score order disagree; --ties {other} evaluates the "
            "other order" for rp, n in conflicts.items() if n]


def _paper_table(out: dict[str, dict[str, float]], ms: list[str], sig: pl.DataFrame | None, base: str, fmt: str,
                 counted: str = "", alpha: float = 0.05) -> str:
    """One row per run, each measure's mean and, for the runs against the baseline, p (Holm) beside it; CSV, or a
    LaTeX tabular (booktabs; * marks p (Holm) <= alpha) whose comment lines say what was counted (`counted`: a table
    pasted into a paper keeps the query count and threshold, user trial AU). By hand: polars writes no LaTeX, and
    pandas' needs jinja2."""
    def p_of(rp: str, m: str) -> tuple[float | None, bool]:
        if sig is None or rp == base:
            return None, False
        r = sig.filter((pl.col("system") == rp) & (pl.col("measure") == m))
        return (float(r["p_holm"][0]), bool(r["significant"][0])) if len(r) else (None, False)

    if fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["run", *(c for m in ms for c in (m, f"{m} p_holm"))])
        for rp, agg in out.items():
            ps = [p_of(rp, m)[0] for m in ms]
            w.writerow([rp, *(c for m, p in zip(ms, ps, strict=True)
                              for c in (f"{agg.get(m, float('nan')):.4f}", "" if p is None else f"{p:.4g}"))])
        return buf.getvalue()

    special = {"\\": "\\textbackslash{}", "~": "\\textasciitilde{}", "^": "\\textasciicircum{}"}

    def tex(text: str) -> str:
        return "".join("\\" + c if c in "&%$#_{}" else special.get(c, c) for c in text)

    lines = ["\\begin{tabular}{l" + "r" * len(ms) + "}", "\\toprule",
             "run & " + " & ".join(tex(m) for m in ms) + " \\\\", "\\midrule"]
    for rp, agg in out.items():
        cells = [f"{agg.get(m, float('nan')):.4f}" + ("$^{*}$" if p_of(rp, m)[1] else "") for m in ms]
        lines.append(f"{tex(rp)} & " + " & ".join(cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}",
              f"% * = p (Holm) <= {alpha:g} against {tex(base)}, paired randomisation test" if sig is not None else "% one run: no test"]
    lines += [f"% {line}" for line in counted.splitlines() if line]
    return "\n".join(lines) + "\n"


AVERAGES = {
    "judged": "score 0 (as trec_eval -c)",
    "run": "left out of the run's mean (as trec_eval without -c)",
}
TIES = {
    "trec": "score as float32 descending, ties by doc id descending; the rank column is ignored (trec_eval)",
    "rank": "the rank column (as written); ties in it by score as float32, then doc id descending",
}


@main.command(name="eval")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory.")
@click.option("--split", default="test", show_default=True, help="Qrels split.")
@click.option("--run", "run_path", required=True, multiple=True, type=click.Path(exists=True, dir_okay=False), help="TREC run file (repeat to compare).")
@click.option("--measures", default=",".join(DEFAULT_MEASURES), show_default=True, help="Comma-separated measures.")
@click.option("--rel-threshold", default=1, show_default=True, help="Grade counted as relevant by binary measures (2 for TREC DL).")
@click.option("--format", "fmt", type=click.Choice(["table", "json", "csv", "latex"]), default="table", show_default=True,
              help="csv / latex: the table alone, for a paper (one row per run; csv: p (Holm) vs the baseline beside each "
                   "measure, latex: * where p (Holm) <= --alpha); notes on stderr.")
@click.option("--per-query", is_flag=True, help="Also print per-query values.")
@click.option("--baseline", default=None, type=click.Path(dir_okay=False), help="Run the others are tested against (default: the first --run).")
@click.option("--ties", type=click.Choice(list(TIES)), default="trec", show_default=True, help="Order within a query: trec = score as float32 desc, then doc id desc (trec_eval); rank = the rank column.")
@click.option("--strict", is_flag=True, help="Qrels naming queries or documents the dataset lacks are an error (default: a "
              "warning with counts), and so is an empty run or one none of whose queries is judged.")
@click.option("--max-drop", "max_drop", multiple=True, metavar="MEASURE=DELTA",
              help="A quality gate (repeatable): exit 3 when a run is below the baseline on MEASURE by more than DELTA "
                   "and the drop is significant (p (Holm) <= --alpha). Implies --strict for the runs.")
@click.option("--alpha", default=0.05, show_default=True, type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
              help="Significance level of the tests, the stars and the gate.")
@click.option("--average", type=click.Choice(list(AVERAGES)), default="judged", show_default=True,
              help="judged: every judged query in every mean, a query a run misses scoring 0 (trec_eval -c); run: only "
                   "the judged queries a run answers (trec_eval without -c); the tests pair the queries every run answers.")
def eval_cmd(dataset, split, run_path, measures, rel_threshold, fmt, per_query, baseline, ties, strict, max_drop, alpha,
             average) -> None:
    """Evaluate TREC run(s) against a dataset's qrels (nDCG@10, R@5, R@10, MRR@10 by default).

    Every judged query of the query file counts (judgements naming unknown query or document ids are
    reported with counts; --strict: an error); a query missing from the run scores 0, and a run whose
    query or document ids do not meet the qrels' is named on stderr. Values agree with
    trec_eval: like trec_eval, each query is re-sorted by score read as a 32-bit float, ties by doc id
    descending, and the rank column is ignored (`--ties rank` evaluates the rank column's order instead).
    Runs written by `hrt run` keep their ranks under that re-sort, so both give the same numbers there.
    With several runs, each is tested against the baseline (paired randomisation test, Holm-corrected
    across runs, per measure; * = significant at --alpha, 0.05). Every judged query is in every mean, as trec_eval -c
    averages: a run that misses a query scores 0 there (`--average run`: only the queries a run answers, as
    trec_eval without -c). Run lines naming ids the dataset lacks, and measures that look past a run's depth,
    are named. `--strict` (and a gate, `--max-drop`) refuse an empty run and one none of whose queries is judged.
    """
    _need_stdout()
    import warnings

    from .loaders import Dataset
    from .metrics import (
        IdMismatchWarning,
        aggregate,
        depth_notes,
        evaluate,
        id_warnings,
        no_relevant,
        parse_measures,
        relevant_words,
        run_depth,
        unknown_run_ids,
    )
    from .runs import rank_conflicts, read_run

    ds = Dataset.open(dataset, corpus=False)  # judged queries alone do: a run of a store ingested from a folder
    _distinct_runs(run_path)
    base = _baseline_run(baseline, run_path)
    qrels = ds.qrels(split, strict=strict)
    ms = [m.strip() for m in measures.split(",") if m.strip()]
    parse_measures(ms)  # an unknown name before any file is read
    gate = _gate_limits(max_drop, ms, len(run_path))
    if gate and average == "run":
        # Averaged over the queries each run answers, a run that leaves out its bad queries would pass (the review).
        raise InputError("--max-drop judges every judged query (a query a run lacks scores 0): leave out --average run")
    strict = strict or bool(gate)
    if empty := no_relevant(qrels, rel_threshold):
        shown = ", ".join(empty[:5]) + (", ..." if len(empty) > 5 else "")
        click.echo(f"note: {len(empty)} of {qrels['qid'].n_unique()} judged queries have no document graded "
                   f">= {rel_threshold} ({shown}); each counts 0 on the binary measures, as in trec_eval", err=True)
    out = {}
    per = {}
    conflicts = {}
    judged = {}
    warned: dict[str, list[str]] = {}
    in_mean: dict[str, int] = {}
    pooled = bool((qrels["rel"] <= 0).any())
    depths = {}
    known = [pl.Series(list(ids), dtype=pl.Utf8) if ids is not None else None  # once for every run
             for ids in (ds.query_ids(), ds.corpus_ids() if ds.has_corpus else None)]
    for rp in run_path:
        run_frame = read_run(rp)
        depths[rp] = run_depth(run_frame)
        said = [*id_warnings(run_frame, qrels, f"the {split} qrels", missing_score_0=average == "judged"),
                *unknown_run_ids(run_frame, *known, str(dataset))]
        if strict and not qrels.join(run_frame.select("qid").unique(), on="qid", how="semi").height:
            # A baseline of zeros passed every gate (user trial BB): an empty run, or one of another split, is no result.
            raise InputError(f"{rp}: " + (said[0] if said else "no judged query in the run") + " (--strict)")
        warned[rp] = said
        for msg in said:
            click.echo(f"warning: {rp}: {msg}", err=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", IdMismatchWarning)  # said above, with the split
            pq = evaluate(run_frame, qrels, [*ms, JUDGED], rel_threshold=rel_threshold, ties=ties,
                          only_run_queries=average == "run")
        in_mean[rp] = pq["qid"].n_unique()
        judged[rp] = aggregate(pq).get(JUDGED, float("nan"))
        pq = pq if JUDGED in ms else pq.filter(pl.col("measure") != JUDGED)
        out[rp] = aggregate(pq)
        per[rp] = pq
        conflicts[rp] = rank_conflicts(run_frame)
        # Pooled judgements (non-relevant ones judged too) that miss most of a run's top 10 (user trial AM: 83%, and
        # nothing said). Qrels of relevant documents only (BEIR's, LoCoMo's) leave every top 10 mostly unjudged by design.
        if pooled and len(run_frame) and judged[rp] < SHALLOW_JUDGED:
            click.echo(f"note: {rp}: only {judged[rp]:.0%} of its top 10 documents are judged ({JUDGED} {judged[rp]:.3f}); "
                       "unjudged documents count as not relevant, so its values are lower bounds: a system that finds "
                       "relevant documents the judges never saw is undervalued", err=True)
    sig = None
    sig_notes: list[str] = []
    if len(run_path) > 1:
        from .compare import TEST_WORDS, SmallSampleWarning, compare

        stacked = pl.concat([pq.select(pl.lit(rp).alias("system"), pl.all()) for rp, pq in per.items()])
        if average == "run":  # a paired test pairs queries: those every run answers
            common = set.intersection(*(set(pq["qid"]) for pq in per.values()))
            stacked = stacked.filter(pl.col("qid").is_in(sorted(common)))
            if any(n != len(common) for n in in_mean.values()):
                sig_notes.append(f"the tests pair the {len(common)} judged queries every run answers")
        if stacked.is_empty():  # runs of disjoint queries (--average run): nothing to pair
            sig_notes.append("no judged query is in every run: no test")
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", SmallSampleWarning)
                sig = compare(stacked, base, alpha=alpha)
            sig_notes += [str(w.message).removeprefix("compare: ") for w in caught if issubclass(w.category, SmallSampleWarning)]
        if gate and sig is not None:
            _gate_decidable(sig, base, gate, alpha)
    deep_notes = depth_notes(depths, ms)
    failed = _gate_failures(sig, gate, alpha)
    relevant = relevant_words(rel_threshold)
    n_judged = qrels["qid"].n_unique()
    counted = (f"{n_judged} judged {split} queries, each in every mean (missing from a run: 0, as trec_eval -c)"
               if average == "judged" else
               f"{n_judged} judged {split} queries; a run's mean counts those it answers (as trec_eval without -c): "
               + ", ".join(f"{rp} {in_mean[rp]}" for rp in run_path))
    if fmt in ("csv", "latex"):
        if per_query:
            raise ToolkitError(f"--per-query goes with --format table or json, not {fmt} (one row per run)")
        click.echo(_paper_table(out, ms, sig, base, fmt, f"{counted}\nrelevant: {relevant}", alpha), nl=False)
        # The caveats a paper's table must carry, on stderr (the review: a star without its "too few queries").
        for line in [f"{counted}; relevant: {relevant}; order: {TIES[ties]}", *sig_notes, *deep_notes,
                     *_conflict_notes(conflicts, ties)]:
            click.echo(f"note: {line}", err=True)
        _gate_exit(gate, failed, base, alpha)
        return
    if fmt == "json":
        doc = {"dataset": str(dataset), "split": split, "queries": qrels["qid"].n_unique(), "rel_threshold": rel_threshold,
               "relevant": relevant, "ties": TIES[ties], "runs": out, JUDGED: judged}
        doc["rank_conflicts"] = conflicts
        doc["missing_queries"] = AVERAGES[average]
        doc["queries_in_mean"] = in_mean
        doc["notes"] = deep_notes
        doc["warnings"] = warned
        doc["baseline"] = base
        doc["alpha"] = alpha
        if sig is not None:
            doc["significance"] = sig.select("system", "measure", "delta", "ci_low", "ci_high", "p_value", "p_holm", "significant").to_dicts()
            doc["significance_test"] = TEST_WORDS
            doc["significance_notes"] = sig_notes
        if per_query:
            doc["per_query"] = {rp: pq.to_dicts() for rp, pq in per.items()}
        if gate:
            doc["gate"] = {"max_drop": gate, "alpha": alpha, "passed": not failed, "failed": failed}
        click.echo(json.dumps(doc, indent=2))
        _gate_exit(gate, failed, base, alpha)
        return
    from .terminal import display_width, ljust

    width = max(display_width(r) for r in run_path)
    click.echo(f"{ljust('run', width)}  " + "  ".join(f"{m:>8}" for m in ms))
    for rp, agg in out.items():
        click.echo(f"{ljust(rp, width)}  " + "  ".join(f"{agg.get(m, float('nan')):>8.4f}" for m in ms))
    if sig is not None:
        click.echo(f"\np (Holm) vs {base}, paired randomisation test (Holm across the runs, per measure):")
        for rp in run_path:
            if rp == base:
                continue
            cells = []
            for m in ms:
                r = sig.filter((pl.col("system") == rp) & (pl.col("measure") == m))
                cells.append(f"{r['p_holm'][0]:>7.3g}{'*' if r['significant'][0] else ' '}" if len(r) else f"{'':>8}")
            click.echo(f"{ljust(rp, width)}  " + "  ".join(cells))
        # Where the stars are, not only in --help (user trial BC: a screen reader read "star" with no meaning)
        click.echo(f"* = significant: p (Holm) <= {alpha:g}")
        if len(ms) > 1:  # (user trial BE: one of 4 null measures starred in 14% of simulated evaluations)
            click.echo(f"note: p (Holm) is corrected across the runs, not across the {len(ms)} measures: a star on one of "
                       f"them by chance is more likely than {alpha:g}; name the measure that decides before looking")
    for note in [*sig_notes, *deep_notes]:
        click.echo(f"note: {note}")
    click.echo(f"\nqueries: {n_judged} judged in {split}; relevant: {relevant}")
    if average == "judged":
        click.echo("missing: a judged query a run lacks scores 0 there, and counts in its mean (as trec_eval -c)")
    else:
        click.echo("missing: a judged query a run lacks is left out of its mean (as trec_eval without -c); in the mean: "
                   + ", ".join(f"{rp} {in_mean[rp]}" for rp in run_path))
    click.echo(f"order: {TIES[ties]}")
    for line in _conflict_notes(conflicts, ties):
        click.echo(f"note: {line}")
    if per_query:
        for rp, pq in per.items():
            click.echo(f"\n{rp}")
            click.echo(_plain_table(pq.pivot(on="measure", index="qid", values="value").sort("qid")))
    _gate_exit(gate, failed, base, alpha)


def _gate_limits(max_drop: tuple[str, ...], measures: list[str], n_runs: int) -> dict[str, float]:
    """`--max-drop nDCG@10=0.01` as {measure: allowed drop}; an error naming the value that cannot be one."""
    gate: dict[str, float] = {}
    for item in max_drop:
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            drop = float(value) if sep else float("nan")
        except ValueError:
            drop = float("nan")
        if not drop >= 0:
            raise InputError(f"--max-drop {item!r}: expected MEASURE=DELTA with DELTA >= 0, e.g. nDCG@10=0.01")
        if name not in measures:
            raise InputError(f"--max-drop {item!r}: {name} is not among --measures ({', '.join(measures)})")
        if name in gate:
            raise InputError(f"--max-drop {item!r}: {name} has a limit already ({name}={gate[name]:g})")
        gate[name] = drop
    if gate and n_runs < 2:
        raise InputError("--max-drop needs a baseline run and at least one more --run to hold against it")
    return gate


def _gate_decidable(sig: pl.DataFrame, base: str, gate: dict[str, float], alpha: float) -> None:
    """An error when a run is below the baseline by more than allowed but the test could not call it significant
    whatever the numbers: ties count for nothing, so with k queries that differ (wins + losses) the smallest p is
    `compare.smallest_p(k)`, after Holm over the runs. A gate passed a drop 9 times the allowance on 3 differing
    queries of 33 (user trial BE)."""
    from .compare import smallest_p

    n_runs = sig["system"].n_unique()
    for r in sig.filter(pl.col("measure").is_in(list(gate))).iter_rows(named=True):
        if not r["delta"] < -gate[r["measure"]]:
            continue  # no drop beyond the allowance: nothing to decide
        k = r["wins"] + r["losses"]
        if (floor := smallest_p(k, n_systems=n_runs)) > alpha:
            raise InputError(
                f"--max-drop cannot decide: {r['system']} is {r['delta']:+.4f} on {r['measure']} against {base} (allowed "
                f"-{gate[r['measure']]:g}), but only {k} judged quer{'y differs' if k == 1 else 'ies differ'}, and the "
                f"smallest p the test can give then is {floor:.3g}, above --alpha {alpha:g}: judge more queries")


def _gate_failures(sig: pl.DataFrame | None, gate: dict[str, float], alpha: float) -> list[dict]:
    """The (run, measure) pairs below the baseline by more than allowed, with p (Holm) <= alpha: a drop must be
    both larger than the team accepts and more than noise, as a tuned config must win by more than noise."""
    if not gate or sig is None:
        return []
    rows = sig.filter(pl.col("measure").is_in(list(gate)))
    return [{"run": r["system"], "measure": r["measure"], "delta": r["delta"], "max_drop": gate[r["measure"]],
             "p_holm": r["p_holm"]}
            for r in rows.iter_rows(named=True) if r["delta"] < -gate[r["measure"]] and r["p_holm"] <= alpha]


def _gate_exit(gate: dict[str, float], failed: list[dict], base: str, alpha: float) -> None:
    """The gate's verdict on stderr (stdout keeps the table or JSON), and exit 3 when it failed."""
    if not gate:
        return
    limits = ", ".join(f"{m} by more than {d:g}" for m, d in gate.items())
    if not failed:
        click.echo(f"gate: passed (no run is significantly below {base} on {limits}; p (Holm) <= {alpha:g})", err=True)
        return
    for f in failed:
        click.echo(f"gate: FAILED: {f['run']}: {f['measure']} {f['delta']:+.4f} against {base} (allowed -{f['max_drop']:g}), "
                   f"p (Holm) {f['p_holm']:.3g} <= {alpha:g}", err=True)
    sys.exit(EXIT_GATE)


@main.command()
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory.")
@click.option("--split", default="test", show_default=True, help="Qrels split to report on.")
@click.option("--config", "configs", multiple=True, required=True, help="Config (preset name or path); repeat. NAME=PATH gives it a label.")
@click.option("--baseline", default=None, help="Label of the baseline config (default: the first).")
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False), help="Store file (default .hrt/<dataset>.duckdb).")
@click.option("--group-by", default="", help="Comma-separated query metadata fields to break results down by (e.g. category).")
@click.option("--rel-threshold", default=1, show_default=True, help="Grade counted as relevant by binary measures.")
@click.option("--latency-sample", default=30, show_default=True, help="Queries timed one by one for per-stage p50/p95 (0 = skip).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="HTML file to write (self-contained).")
@click.option("--json", "json_out", default=None, type=click.Path(dir_okay=False),
              help="Also write the report's tables as JSON (A/B, significance, config diff, breakdown, latency, notes).")
@click.option("--as-of", "as_of", default=None, metavar="DATE", callback=lambda ctx, param, v: _iso_date(v),
              help="Reference time of the recency priors for queries without a date (as hrt run; default: each config's "
                   "priors.as_of, else now, which the report then names).")
@_WAIT_OPTION
def report(dataset, split, configs, baseline, store_path, group_by, rel_threshold, latency_sample, out, json_out, as_of,
           wait_s) -> None:
    """Compare configs on a dataset: A/B table (R@1, R@5, P@3, nDCG@10, MRR@10, latency), significance
    against the baseline (randomisation test, Holm), break-downs by query metadata, per-stage latency,
    and plotly figures, in one self-contained HTML file."""
    _own_provider_lines()
    from .loaders import Dataset, load_corpus
    from .report import build_report, check_group_fields
    from .store import Store

    ds = Dataset.open(dataset)
    named = {}
    for c in configs:
        label, sep, src = c.partition("=")
        named[label if sep else Path(c).stem] = src if sep else c
    base = baseline or next(iter(named))
    if base not in named:
        raise ToolkitError(f"--baseline {base!r} is not one of {list(named)}")
    cache = store_path is None
    store_path = store_path or _default_store(ds)
    from .config import load_config
    from .rerank_env import resolve_rerank

    # The reranker HRT_RERANK_* names, as `hrt run` uses it (user trial AN: the report skipped it and said "ok").
    loaded, clocks = {}, []
    for label, src in named.items():
        loaded[label], rr_source = resolve_rerank(load_config(src))
        if rr_source.source == "environment":
            click.echo(f"{label}: {rr_source.describe(loaded[label])}", err=True)
        if as_of is not None and loaded[label].priors.recency_field is not None:
            loaded[label] = loaded[label].with_updates({"priors.as_of": as_of})
        loaded[label], clock = _pin_clock(loaded[label], label)
        if clock:
            clocks.append(clock)
            click.echo(f"note: {clock}", err=True)
    _check_out(out, store_path)
    asked = ds.queries(split)
    check_group_fields(asked, [g for g in group_by.split(",") if g])  # a typo must not cost an ingest
    in_sample = _in_sample_note(loaded, ds, split, asked["qid"].to_list(), asked["text"].to_list())
    with _closing_embedder(_auto_ingest_embedder(list(loaded.values()), store_path)) as emb, \
            Store(store_path, embedder=emb, wait_s=_wait(wait_s, cache)) as st:
        corpus = load_corpus(ds.root)
        lost = _warn_judged_skipped(ds, split, corpus)
        st.ingest(corpus, settings=_cache_settings(loaded.values(), cache), embed=_needs_vectors(loaded.values()),
                  progress=_progress())
        rep = build_report(
            st, ds.queries(split), ds.qrels(split), loaded, baseline=base, dataset=ds.name, split=split,
            group_by=[g for g in group_by.split(",") if g], rel_threshold=rel_threshold, latency_sample=latency_sample,
        )
    # The HTML says it too, not only this terminal (user trial AM: dropped judgements were on stderr only).
    rep.notes[:0] = [*in_sample, *(f"{ds.root / 'qrels' / f'{split}.tsv'}: {p}" for p in ds.qrels_problems(split)),
                     *([lost] if lost else []), *clocks]
    rep.write_html(out)
    if json_out:
        rep.write_json(json_out)
    click.echo(_plain_table(rep.ab))
    click.echo(f"report -> {out}" + (f", {json_out}" if json_out else ""))


@main.command()
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory.")
@click.option("--split", default="dev", show_default=True, help="Split to tune on (test is refused unless --force).")
@click.option("--base", default=None, help="Config to start from (preset name or path; default: the `default` preset).")
@click.option("--space", default=None, type=click.Path(exists=True, dir_okay=False), help="Search space YAML (default: fusion fields).")
@click.option("--method", type=click.Choice(["tpe", "random", "grid"]), default="tpe", show_default=True)
@click.option("--budget", default=40, show_default=True, help="Number of trials.")
@click.option("--measure", default="nDCG@10", show_default=True, help="Objective (mean over queries).")
@click.option("--folds", default=5, show_default=True, help="Cross-validation folds over queries.")
@click.option("--stratify", default=None, help="Query metadata field to stratify folds by (e.g. category).")
@click.option("--seed", default=0, show_default=True)
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False), help="Store file (default .hrt/<dataset>.duckdb).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Tuned config YAML (a .report.json is written beside it).")
@click.option("--force", is_flag=True, help="Allow tuning on the test split (don't report numbers from it), or from a learned "
              "base whose model was trained on these queries.")
@click.option("--no-anchors", is_flag=True, help="Leave out the fixed settings (one list alone, plain RRF) "
              "that compete with the search.")
@click.option("--alpha", default=0.05, show_default=True, type=float, help="Significance level the held-out "
              "gain over the base must reach (a sign-flip test that re-runs the cross-validated selection) for the base "
              "to be replaced.")
@click.option("--rel-threshold", default=1, show_default=True, type=click.IntRange(1),
              help="Grade a binary --measure counts as relevant (2 for TREC DL).")
@_WAIT_OPTION
def tune(dataset, split, base, space, method, budget, measure, folds, stratify, seed, store_path, out, force,
         no_anchors, alpha, rel_threshold, wait_s) -> None:
    """Tune the live (rescore) pipeline fields on a dev split from cached stages, with k-fold
    cross-validation over queries. The base is kept unless the tuned procedure beats it on held-out folds
    by more than noise (p < --alpha); the output says which rule decided, every field changed, and the
    held-out gain with its 95% interval. Writes a config `hrt run --config` loads."""
    from .config import DEFAULT_PRESET
    from .loaders import Dataset, load_corpus
    from .store import Store
    from .tune import tune as run_tune

    ds = Dataset.open(dataset)
    cache = store_path is None
    store_path = store_path or _default_store(ds)
    _check_out(out, store_path)
    base_cfg = _load_cfg(base or DEFAULT_PRESET, None)
    with _closing_embedder(_auto_ingest_embedder([base_cfg], store_path)) as emb, \
            Store(store_path, embedder=emb, wait_s=_wait(wait_s, cache)) as st:
        corpus = load_corpus(ds.root)
        _warn_judged_skipped(ds, split, corpus)
        st.ingest(corpus, settings=_cache_settings([base_cfg], cache), embed=_needs_vectors([base_cfg]),
                  progress=_progress())
        _, rep = run_tune(
            st, ds.root, split=split, base=base or DEFAULT_PRESET, space=space, method=method, budget=budget, measure=measure,
            folds=folds, stratify=stratify, seed=seed, out=out, force=force, anchors=not no_anchors, alpha=alpha,
            rel_threshold=rel_threshold, progress=_progress(),  # (user trial Y: optuna's bars in a captured stderr)
        )
    d = rep.to_dict()
    keys = ("chosen", "rule", "base_dev", "best_dev", "candidate", "candidate_dev", "cv_heldout", "heldout_gain",
            "heldout_ci", "p_value", "cv_heldout_search", "cv_heldout_anchors")
    click.echo(json.dumps({k: d[k] for k in keys} | {"seed": rep.seed, "changed": d["diff"], "candidate_changes": d["candidate_diff"],
                                                     "notes": rep.notes}, indent=2, default=str))
    lo, hi = rep.heldout_ci
    # The prose on stderr: stdout is one JSON object a script can read (user trial AL: json.load failed on it).
    # When the base is kept, the gain is the search's (what it would have shipped), not the written config's:
    # "kept the base" beside a bare "held-out gain -0.25" read as a contradiction (user trial AY).
    gain_of = f"held-out gain over {rep.base}" if rep.chosen != "base" else f"the search's held-out gain over {rep.base} (not shipped)"
    click.echo(f"{rep.rule}\n{gain_of}: {rep.heldout_gain:+.4f} {measure} (95% CI [{lo:+.4f}, {hi:+.4f}]); "
               f"fields changed: {', '.join(rep.diff) or 'none'}", err=True)
    for line in rep.notes:
        click.echo(f"note: {line}", err=True)
    click.echo(f"tuned config -> {out} (seed {rep.seed})", err=True)


@main.command(name="train-reranker")
@click.option("--dataset", required=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory.")
@click.option("--split", default="dev", show_default=True, help="Judgements to train on (test is refused unless --force).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Model directory to write (load it with rerank.provider cross-encoder, rerank.model PATH).")
@click.option("--store", "store_path", default=None, type=click.Path(dir_okay=False), help="Store file (default .hrt/<dataset>.duckdb); ingested if needed.")
@click.option("--base-model", default=None, help="Local model directory to start from (default: packaged all-MiniLM-L6-v2).")
@click.option("--epochs", default=3, show_default=True, type=click.IntRange(1), help="Epochs; the best on held-out queries is kept.")
@click.option("--negatives", default=15, show_default=True, type=click.IntRange(1), help="Hard negatives per query and epoch.")
@click.option("--depth", default=30, show_default=True, type=click.IntRange(1), help="Depth of the BM25/dense lists negatives are mined from.")
@click.option("--loss", type=click.Choice(["lambda", "listnet", "bce"]), default="lambda", show_default=True)
@click.option("--lr", default=5e-5, show_default=True, type=float, help="Encoder learning rate.")
@click.option("--max-length", default=160, show_default=True, type=click.IntRange(16), help="Max tokens of query + passage.")
@click.option("--freeze-layers", default=2, show_default=True, type=click.IntRange(0, 12), help="Lowest encoder layers kept frozen (with the word embeddings).")
@click.option("--holdout", default="auto", show_default=True, help="Share of the split's queries held out for early stopping and the verdict; auto: 0.2, or 0.5 for a split of under 100 queries.")
@click.option("--pseudo", default="0", show_default=True, help="Pseudo-queries cut from the corpus added to the training queries (a number, or auto: top up to 600).")
@click.option("--holdout-by", type=click.Choice(["query", "scope"]), default="query", show_default=True, help="Hold out random queries, or whole scopes (conversations).")
@click.option("--eval-depth", default=40, show_default=True, type=click.IntRange(1), help="First-stage candidates reranked when judging each epoch.")
@click.option("--first-stage", default="bm25-only", show_default=True, help="Config (preset or path) whose fused list the reranker goes behind when judged on held-out queries.")
@click.option("--max-positives", default=16, show_default=True, type=click.IntRange(1), help="Judged-relevant documents per query and epoch (caps TREC-DL-style queries).")
@click.option("--seed", default=0, show_default=True)
@click.option("--export-data", default=None, type=click.Path(dir_okay=False), help="Also write the training pairs (query, text, label) here (.parquet, .csv or .jsonl).")
@click.option("--force", is_flag=True, help="Allow training on the test split (every test number is then meaningless).")
@_WAIT_OPTION
def train_reranker(dataset, split, out, store_path, base_model, epochs, negatives, depth, loss, lr, max_length,
                   freeze_layers, holdout, pseudo, holdout_by, eval_depth, first_stage, max_positives, seed, export_data, force,
                   wait_s) -> None:
    """Fine-tune a CrossEncoder reranker on a split's judgements, with hard negatives mined from the
    toolkit's own BM25 and dense lists, a listwise loss and early stopping on held-out queries.

    Ends with a plain verdict: whether reranking the first stage with position-aware blending helps on the
    held-out queries (paired t-test). A reranker that does not help is reported as such.
    """
    from .loaders import Dataset, load_corpus
    from .store import Store
    from .train import train_reranker as run_train

    try:
        holdout = holdout if holdout == "auto" else float(holdout)
        pseudo = pseudo if pseudo == "auto" else int(pseudo)
    except ValueError as e:
        raise click.BadParameter(f"--holdout/--pseudo: a number or 'auto' ({e})") from None
    ds = Dataset.open(dataset)
    cache = store_path is None
    store_path = store_path or _default_store(ds)
    with Store(store_path, wait_s=_wait(wait_s, cache)) as st:
        st.ingest(load_corpus(ds.root), progress=_progress())
        rep = run_train(
            st, ds.root, split=split, out=out, base_model=base_model, epochs=epochs, negatives_per_query=negatives,
            depth=depth, loss=loss, lr=lr, max_length=max_length, freeze_layers=freeze_layers, holdout=holdout,
            pseudo=pseudo, holdout_by=holdout_by,
            eval_depth=eval_depth, first_stage=first_stage, max_positives=max_positives, seed=seed, force=force,
            progress=_progress(),  # bars only at a terminal, and never with TQDM_DISABLE (user trial Y)
        )
    if export_data:
        from .files import JSON_LINES_SUFFIXES

        data = pl.read_parquet(Path(out) / "training_data.parquet")
        dest = Path(export_data)
        if dest.suffix.lower() == ".csv":
            data.write_csv(dest)
        elif dest.suffix.lower() in JSON_LINES_SUFFIXES:
            data.write_ndjson(dest)
        else:
            data.write_parquet(dest)
        click.echo(f"training pairs ({len(data)} rows) -> {dest}")
    click.echo(rep.summary())


@main.command(name="train-fusion")
@click.option("--dataset", "datasets", required=True, multiple=True, type=click.Path(exists=True, file_okay=False), help="BEIR-layout directory (repeat to pool collections).")
@click.option("--store", "stores", multiple=True, type=click.Path(dir_okay=False), help="Store of each --dataset, in the same order (default .hrt/<dataset>.duckdb); ingested if needed.")
@click.option("--rel-threshold", "rel_thresholds", multiple=True, type=click.IntRange(1), help="Grade counted as relevant for calibration, per --dataset in order (default 1; 2 for TREC DL).")
@click.option("--split", default="dev", show_default=True, help="Qrels split to train on.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Model file to write (.json); the report goes beside it (.report.json).")
@click.option("--config", default="learned", show_default=True, help="Config whose retrieval settings make the candidates.")
@click.option("--holdout", default=0.2, show_default=True, type=click.FloatRange(0.0, 0.9), help="Share of each collection's queries held out for early stopping, the report and calibration.")
@click.option("--rounds", default=400, show_default=True, type=click.IntRange(1), help="Most trees (early stopping picks fewer).")
@click.option("--prior", default=2.0, show_default=True, type=click.FloatRange(0.0), help="Weight of plain RRF the trees start from (0: none).")
@click.option("--seed", default=0, show_default=True)
@click.option("--force", is_flag=True, help="Allow training on the test split (every test number is then meaningless).")
@click.option("--pseudo-store", "pseudo_stores", multiple=True, type=click.Path(exists=True, dir_okay=False), help="Store of an unjudged collection (the one the model is for): its corpus adds --pseudo pseudo-queries to the training data.")
@click.option("--pseudo", default=300, show_default=True, type=click.IntRange(1), help="Pseudo-queries per --pseudo-store.")
@_WAIT_OPTION
def train_fusion_cmd(datasets, stores, rel_thresholds, split, out, config, holdout, rounds, prior, seed, force, pseudo_stores, pseudo,
                     wait_s) -> None:
    """Train a learned fusion model (LightGBM lambdarank) on judged queries of one or more collections.

    Use it with `fusion.method: learned` and `fusion.model: OUT` (the `learned` preset uses the shipped
    model). Prints held-out nDCG@10 against plain RRF and each list alone, and the features that mattered.
    """
    from contextlib import ExitStack

    from .loaders import Dataset, load_corpus
    from .store import Store
    from .train_fusion import train_fusion

    for opt, vals in (("--store", stores), ("--rel-threshold", rel_thresholds)):
        if vals and len(vals) != len(datasets):
            raise click.BadParameter(f"give {opt} once per --dataset ({len(datasets)}), or not at all")
    _check_out(out, *(stores or [_default_store(Dataset.open(d)) for d in datasets]), *pseudo_stores)
    with ExitStack() as stack:
        sources = []
        for i, d in enumerate(datasets):
            ds = Dataset.open(d)
            st = stack.enter_context(Store(stores[i] if stores else _default_store(ds), wait_s=_wait(wait_s, not stores)))
            st.ingest(load_corpus(ds.root), progress=_progress())
            sources.append((st, ds.root, rel_thresholds[i] if rel_thresholds else 1))
        extra = [stack.enter_context(Store(p)) for p in pseudo_stores]
        rep = train_fusion(sources, out, split=split, config=config, seed=seed, holdout=holdout, rounds=rounds, prior=prior, force=force,
                           pseudo_stores=extra, pseudo=pseudo, progress=_progress())  # fmt: skip
    click.echo(rep.summary())


@main.command()
@click.option("--config", required=True, help="Config to export (preset name or path).")
@click.option("--engine", required=True, type=click.Choice(["toolkit", "opensearch", "elasticsearch", "weaviate", "lancedb"]))
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="File for the engine payload; its format follows the extension (.json, .yaml; .py for lancedb). Caveats go to <out>.README.md.")
@click.option("--store", "store_path", type=click.Path(dir_okay=False, exists=True),
              help="The store the pipeline runs on: its embedding model, vector dimension, stemmer and stopwords fill what the config leaves to the store.")
def export(config, engine, out, store_path) -> None:
    """Export a pipeline config to another engine, listing what does not carry over (bonus, blend, dedup...).
    HRT_RERANK_* variables apply as they do for `hrt search` and `hrt run`."""
    from .config import load_config
    from .export import write_export
    from .rerank_env import resolve_rerank
    from .store import Store

    cfg, rr_source = resolve_rerank(load_config(config))
    with contextlib.ExitStack() as stack:
        st = stack.enter_context(Store(store_path, read_only=True)) if store_path else None
        res = write_export(cfg, engine, out, source=config, store=st)
    click.echo(f"{engine} -> {out}")
    if rr_source.source == "environment":
        click.echo(f"  {rr_source.describe(cfg)}")
    if res.min_version:
        click.echo(f"  minimum version: {res.min_version}")
        click.echo(f"  {res.analyzer_note}")
    for item in res.not_carried:
        click.echo(f"  not carried over: {item}")
    for note in res.notes:
        click.echo(f"  note: {note}")


@main.command()
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
def info(store_path) -> None:
    """Show what a store holds: documents, chunks, embeddings, model, index settings."""
    from .store import Store

    with Store(store_path, read_only=True) as st:
        stats = st.stats()
        click.echo(json.dumps(stats, indent=2))
        # What the numbers mean for a search, as a search would say it (user trial AW: `info` showed a boolean only,
        # and an old vss index as if it served).
        if not stats["bm25_text_current"]:
            what, redo = st.stale_text_words()
            click.echo(f"note: BM25 may miss words in this store's non-ASCII text: {what}; {redo}", err=True)
        vi = stats["vector_index"]
        if vi and vi.get("engine") != "usearch":
            click.echo("note: its HNSW index is DuckDB's vss index of an older toolkit, which this one does not read: "
                       "searches go exact until the store's next write (`hrt ingest`, `hrt delete`) rebuilds it", err=True)


def _ids_from_args(doc_ids: tuple[str, ...], store_path: str) -> tuple[str, ...]:
    """`hrt delete`'s and `hrt show`'s ids: as given, or ("-") one per line from stdin, as written (an id may have
    spaces at its ends; blank lines are skipped); the store must exist."""
    from .store import no_such_store

    if doc_ids == ("-",):
        if sys.stdin is None:
            raise ToolkitError("the ids are '-' (read them from stdin), but stdin is closed")
        doc_ids = tuple(line.rstrip("\r\n") for line in sys.stdin if line.strip())
    if not Path(store_path).expanduser().exists():
        raise no_such_store(store_path)
    return doc_ids


@main.command()
@click.argument("doc_ids", nargs=-1)
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
@click.option("--where", "where", multiple=True, metavar="FIELD=VALUE", callback=lambda ctx, param, v: _where(v),
              help="Delete every document whose metadata FIELD equals VALUE (repeatable, all must hold; as `hrt search "
                   "--where` matches), instead of ids.")
@click.option("--missing-ok", is_flag=True, help="Skip ids the store does not hold (default: an error, nothing deleted).")
@click.option("--wait", "wait_s", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds to keep trying while another process holds the store (a write, or readers during a write).")
def delete(doc_ids, store_path, where, missing_ok, wait_s) -> None:
    """Delete documents by id (DOC_ID... or - to read ids from stdin, one per line), or by metadata (--where
    user=dara), with their chunks, vectors and index entries, in one transaction. An id the store does not hold
    stops it before anything is deleted. The file keeps the deleted text in its freed space until `hrt compact`."""
    from .store import Store

    if bool(doc_ids) == bool(where):
        raise click.UsageError("give the ids to delete (DOC_ID... or -) or --where FIELD=VALUE, not both" if where else
                               "give the ids to delete (DOC_ID... or - for stdin), or --where FIELD=VALUE")
    if where and missing_ok:
        raise click.UsageError("--missing-ok is for ids; --where deletes what matches, which may be nothing")
    doc_ids = _ids_from_args(doc_ids, store_path)
    with Store(store_path, wait_s=wait_s) as st:
        gen = st.generation()
        try:
            ids = st.ids_where(where) if where else doc_ids
            gone = st.delete(ids, missing_ok=missing_ok)
        except BaseException as e:
            _interrupted_write(e, st, gen, "delete")
            raise
    if not where:
        click.echo(f"deleted {gone} document(s) of {len(set(doc_ids))} asked", err=True)
        return
    shown = " and ".join(f"{k} = {v!r}" for k, v in where.items())
    named = f": {', '.join(ids[:5])}" + (f" and {len(ids) - 5:,} more" if len(ids) > 5 else "") if ids else ""
    click.echo(f"deleted {gone} document(s) whose metadata has {shown}{named}" + (
        "" if gone else " (none has: values are compared exactly, after Unicode NFC, or as numbers)"), err=True)


@main.command()
@click.argument("doc_ids", nargs=-1, required=True)
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per document (doc_id, title, source, scope, metadata as an object, text).")
@click.option("--missing-ok", is_flag=True, help="Skip ids the store does not hold (default: an error naming them).")
@click.option("--wait", "wait_s", default=0.0, show_default=True, type=click.FloatRange(0),
              help="Seconds to keep trying while another process writes the store.")
def show(doc_ids, store_path, fmt, missing_ok, wait_s) -> None:
    """Print stored documents whole, by id (DOC_ID... or - to read ids from stdin, one per line): what a search
    result points to, and a memory an agent already knows the id of (user trial BW: a commit's SHA was its id, and
    nothing fetched it). Ids are exact; in the order asked."""
    from .store import Store

    doc_ids = _ids_from_args(doc_ids, store_path)
    if not doc_ids:
        raise click.UsageError("no ids given (stdin held none)")
    asked = list(dict.fromkeys(doc_ids))  # in the order asked, each once
    with Store(store_path, read_only=True, wait_s=wait_s) as st:
        docs = st.documents(asked)
    found = {r["doc_id"]: r for r in docs.iter_rows(named=True)}
    missing = [d for d in asked if d not in found]
    if missing and not missing_ok:
        shown = ", ".join(repr(d) for d in missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ToolkitError(f"{store_path}: no document with id {shown} (ids are exact; `hrt search` finds documents by "
                           "their words; --missing-ok skips them)")
    rows = [found[d] for d in asked if d in found]
    for r in rows:
        r["metadata"] = json.loads(r["metadata"]) if r["metadata"] else {}
    # Through `hrt search`'s stdout path: whole or a broken pipe, JSON escaped for a narrow encoding (review BZ).
    if fmt == "json":
        _echo_whole(_json_for_stdout(json.dumps(
            [{k: r[k] for k in ("doc_id", "title", "source", "scope", "metadata", "text")} for r in rows], ensure_ascii=False, indent=2),
            indent=2))
    else:
        blocks = []
        for r in rows:
            head = [f"doc_id: {r['doc_id']}"] + [f"{k}: {r[k]}" for k in ("title", "source", "scope") if r[k]]
            head += [f"metadata: {json.dumps(r['metadata'], ensure_ascii=False)}"] if r["metadata"] else []
            blocks.append("\n".join(head) + "\n\n" + (r["text"] or ""))
        if blocks:
            _echo_whole("\n\n".join(blocks))
    if missing:
        click.echo(f"note: {len(missing)} id(s) not in the store: {', '.join(missing[:5])}", err=True)


@main.command()
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
@_WAIT_OPTION
def compact(store_path, wait_s) -> None:
    """Rewrite the store into a fresh file, in place: deleted and replaced documents' text, which DuckDB leaves in
    the space it freed (readable with `strings`), is gone from the file, which shrinks when much was freed. Run
    it after `hrt delete` of data that must not stay on disk (with `hrt clear-cache --vectors` for cached query
    vectors). Other processes must not hold the store meanwhile (--wait waits for them)."""
    from .store import compact_store

    before, after = compact_store(store_path, wait_s=_wait(wait_s, False))
    click.echo(f"compacted {store_path}: {before / 2**20:,.1f} MB -> {after / 2**20:,.1f} MB; the text of deleted and "
               "replaced documents is no longer in the file", err=True)


@main.command(name="clear-cache")
@click.option("--store", "store_path", required=True, type=click.Path(dir_okay=False), help="Store file made by `hrt ingest`.")
@click.option("--model", default=None, help="Only this reranker's scores (model@url for an http reranker, as `hrt info` "
                                          "lists them; default: every reranker's).")
@click.option("--vectors", is_flag=True, help="Also drop cached vectors no stored chunk has (texts edited away or of "
                                              "removed documents, query vectors): they are embedded again if they return.")
@_WAIT_OPTION
def clear_cache(store_path, model, vectors, wait_s) -> None:
    """Drop cached reranker scores and the stage frames built from them, so the next search asks the reranker
    again (an endpoint that now serves other weights under the same name); --vectors, the cached vectors of texts no
    document holds any more. Documents, their vectors and indexes stay."""
    from .store import Store, no_such_store

    if not Path(store_path).expanduser().exists():
        raise no_such_store(store_path)
    with Store(store_path, wait_s=_wait(wait_s, False)) as st:
        got = st.clear_caches(model=model, vectors=vectors)
    click.echo(f"dropped {got.get('rerank_cache', 0):,} cached reranker score(s), {got['stage_cache']:,} cached stage "
               f"set(s)" + (f" and {got['embedding_cache']:,} cached vector(s) no chunk has" if vectors else ""), err=True)


@main.command()
def presets() -> None:
    """List the shipped pipeline presets (use with --config NAME)."""
    from .config import list_presets, load_config

    for name in list_presets():
        click.echo(f"{name:<14} {load_config(name).description}")


@main.group(name="config")
def config_group() -> None:
    """Check, show and compare pipeline configs (preset names or files) without running them: what a CI job runs
    before the expensive steps, and what a review of a tuned config reads."""


@config_group.command(name="check")
@click.argument("configs", nargs=-1, required=True)
@click.option("--strict", is_flag=True, help="Warnings (settings that do nothing, a model trained on other "
              "settings, ...) are errors: exit 2.")
def config_check(configs: tuple[str, ...], strict: bool) -> None:
    """Validate each CONFIG; errors name the file and field, warnings say which settings do nothing."""
    import warnings

    from .config import load_config

    failed = False
    for name in configs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                cfg = load_config(name)
            except ToolkitError as e:  # said, and the next config is still checked
                click.echo(f"error: {e}", err=True)
                click.echo(f"{name}: not ok")
                failed = True
                continue
        said = list(dict.fromkeys(str(w.message) for w in caught if issubclass(w.category, UserWarning)))
        for msg in said:
            click.echo(f"{'error' if strict else 'warning'}: {msg}", err=True)  # (the message names the file)
        failed |= strict and bool(said)
        click.echo(f"{name}: {'not ok' if strict and said else 'ok'} ({cfg.name or 'unnamed'}"
                   + (f", {len(said)} warning(s)" if said else "") + ")")
    if failed:
        sys.exit(EXIT_ERROR)


@config_group.command(name="show")
@click.argument("config")
@click.option("--format", "fmt", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
def config_show(config: str, fmt: str) -> None:
    """Print CONFIG with every field resolved (`extends` applied, relative paths absolute), as `save_config`
    writes it: the file loads back to the same config."""
    from .config import config_text

    _need_stdout()
    click.echo(config_text(config, fmt), nl=False)


@config_group.command(name="diff")
@click.argument("base")
@click.argument("other")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def config_diff(base: str, other: str, fmt: str) -> None:
    """The fields where OTHER differs from BASE, after resolving both (names and descriptions are labels, not
    settings, and are left out). Exit 0 either way: a difference is an answer, not an error."""
    import warnings

    from .config import load_config
    from .panels import config_differences

    with warnings.catch_warnings():  # `config check` says those; here they would bury the answer
        warnings.simplefilter("ignore", UserWarning)
        changes = config_differences(load_config(base), load_config(other))
    if fmt == "json":
        from .config import _json_safe  # inf as "inf", as a saved JSON config writes it

        click.echo(json.dumps({"base": base, "other": other, "changes": [
            {"field": k, "base": _json_safe(x), "other": _json_safe(y)} for k, x, y, _ in changes]}, indent=2))
        return
    if not changes:
        click.echo(f"no setting differs between {base} and {other}")
    for k, _, _, shown in changes:
        click.echo(f"{k}: {shown}")


if __name__ == "__main__":
    main()
