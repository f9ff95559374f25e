"""Where the held-out packages keep things on disk, found by reading their source.

The packages are the ``holdout = true`` wheels of ``wheels.toml``: more of what a vLLM-like CI
pulls in (a disk cache, model files, configuration, speech metrics, audio, serving metrics,
multimodal inputs, HTTP clients, a grammar parser, pickling, tensor streaming, training logs),
none of them in the measured corpus of ``corpus_truth.py``. Their truth below was written from
the wheels' sources by hand and committed before the audit was ever run on them, so that
measuring the audit on them says how it does on code nobody tuned it to.

When a held-out package's misses are fixed, it has been tuned to: it moves to
``corpus_truth.py`` and another package, its truth written first, takes its place here.

The rules are ``corpus_truth.py``'s (its module docstring): what one place is, what is not a
place, the classes, and that test, benchmark and example files inside the wheels are left out.
A wheel with no place of its own has an empty tuple, as peft does there.
"""

from __future__ import annotations

from .corpus_truth import Place

#: Per distribution (named as the audit names it), every place found in its source.
HOLDOUT: dict[str, tuple[Place, ...]] = {
    "dill": (
        Place(
            "dill/session.py",
            25,
            "cache",
            "TEMPDIR = gettempdir(): dump_module()/load_module()'s default session.pkl there",
        ),
        Place(
            "dill/temp.py",
            115,
            "throwaway",
            "NamedTemporaryFile(suffix='.py'): dump_source()'s file, in the temp directory",
        ),
        Place(
            "dill/temp.py",
            162,
            "throwaway",
            "NamedTemporaryFile(): dill.temp.dump()'s pickle, in the temp directory",
        ),
        Place(
            "dill/_dill.py",
            841,
            "throwaway",
            "TemporaryFile(): an unpickled '<fdopen>' file handle becomes a temporary file",
        ),
        Place(
            "dill/_dill.py",
            873,
            "throwaway",
            "TemporaryFile(): a handle whose file is gone, unpickled as a temporary file",
        ),
        Place(
            "dill/_objects.py",
            114,
            "throwaway",
            "mkstemp(): made when load_types() imports the catalogue, removed at its end",
        ),
        Place(
            "dill/_objects.py",
            116,
            "throwaway",
            "TemporaryFile(): the catalogue's open temporary file (Python before 3.13)",
        ),
        Place(
            "dill/_objects.py",
            118,
            "throwaway",
            "NamedTemporaryFile(): the same on Python 3.13 and later",
        ),
    ),
    "diskcache": (
        Place(
            "diskcache/core.py",
            435,
            "throwaway",
            "Cache(directory=None): mkdtemp(prefix='diskcache-'), a fresh cache each time",
        ),
        Place(
            "diskcache/fanout.py",
            32,
            "throwaway",
            "FanoutCache(directory=None): mkdtemp(prefix='diskcache-'), the same",
        ),
    ),
    "gguf": (
        Place(
            "gguf/gguf_writer.py",
            387,
            "throwaway",
            "SpooledTemporaryFile(): tensors past 256 MiB spill to the temp directory",
        ),
        Place(
            "gguf/utility.py",
            236,
            "uncached-download",
            "requests.get(): a remote safetensors range (Hub model) read on every call",
        ),
    ),
    "httpx": (
        Place(
            "httpx/_config.py",
            35,
            "config",
            "SSL_CERT_FILE: the CA bundle create_ssl_context() verifies servers with",
        ),
        Place(
            "httpx/_config.py",
            37,
            "config",
            "SSL_CERT_DIR: a directory of CA certificates, when SSL_CERT_FILE is unset",
        ),
    ),
    "hydra-core": (
        Place(
            "hydra/core/utils.py",
            129,
            "output",
            "hydra.runtime.output_dir: the job's dir (default outputs/<date>/<time> in the cwd)",
        ),
        Place(
            "hydra/_internal/core_plugins/basic_sweeper.py",
            162,
            "output",
            "hydra.sweep.dir (default multirun/<date>/<time> in the cwd): multirun.yaml",
        ),
    ),
    # jiwer reads and writes only the files its caller names.
    "jiwer": (),
    "lark": (
        Place(
            "lark/lark.py",
            346,
            "cache",
            "Lark(cache=True): gettempdir()/.lark_cache_<user>_<sha256>_<py>.tmp, the parser",
        ),
    ),
    "mistral-common": (
        Place(
            "mistral_common/image.py",
            32,
            "uncached-download",
            "download_image(): an image URL fetched into memory on every call",
        ),
        Place(
            "mistral_common/tokens/tokenizers/audio.py",
            120,
            "uncached-download",
            "Audio.from_url(): an audio URL fetched into memory on every call",
        ),
    ),
    "prometheus-client": (
        Place(
            "prometheus_client/values.py",
            80,
            "ipc",
            "prometheus_multiproc_dir (deprecated): copied into PROMETHEUS_MULTIPROC_DIR",
        ),
        Place(
            "prometheus_client/values.py",
            95,
            "ipc",
            "PROMETHEUS_MULTIPROC_DIR: each process's mmapped <type>_<pid>.db metric files",
        ),
        Place(
            "prometheus_client/multiprocess.py",
            26,
            "ipc",
            "prometheus_multiproc_dir (deprecated): copied into PROMETHEUS_MULTIPROC_DIR",
        ),
        Place(
            "prometheus_client/multiprocess.py",
            28,
            "ipc",
            "PROMETHEUS_MULTIPROC_DIR: the collector reads every process's .db files there",
        ),
        Place(
            "prometheus_client/multiprocess.py",
            180,
            "ipc",
            "PROMETHEUS_MULTIPROC_DIR: mark_process_dead() removes a dead process's files",
        ),
        Place(
            "prometheus_client/multiprocess.py",
            180,
            "ipc",
            "prometheus_multiproc_dir: the same, the deprecated name as the fallback",
        ),
    ),
    "pydub": (
        Place(
            "pydub/audio_segment.py",
            561,
            "throwaway",
            "NamedTemporaryFile(delete=False): from_file()'s input handed to ffmpeg",
        ),
        Place(
            "pydub/audio_segment.py",
            567,
            "throwaway",
            "NamedTemporaryFile(delete=False): the same, written in chunks after an OSError",
        ),
        Place(
            "pydub/audio_segment.py",
            580,
            "throwaway",
            "NamedTemporaryFile(delete=False): ffmpeg's decoded output for from_file()",
        ),
        Place(
            "pydub/audio_segment.py",
            881,
            "throwaway",
            "NamedTemporaryFile(delete=False): export()'s WAV handed to ffmpeg",
        ),
        Place(
            "pydub/audio_segment.py",
            903,
            "throwaway",
            "NamedTemporaryFile(delete=False): ffmpeg's encoded output for export()",
        ),
        Place(
            "pydub/audio_segment.py",
            1267,
            "throwaway",
            "TemporaryFile(): append()'s crossfaded audio, in the temp directory",
        ),
        Place(
            "pydub/playback.py",
            14,
            "throwaway",
            "NamedTemporaryFile(suffix='.wav'): the WAV ffplay plays",
        ),
        Place(
            "pydub/utils.py",
            56,
            "throwaway",
            "TemporaryFile(): export()'s output when the caller names no file",
        ),
    ),
    "qwen-vl-utils": (
        Place(
            "qwen_vl_utils/vision_process.py",
            104,
            "uncached-download",
            "fetch_image(): an http(s) image fetched into memory on every call",
        ),
    ),
    "requests": (
        Place(
            "requests/utils.py",
            239,
            "config",
            "NETRC: the netrc file get_netrc_auth() reads credentials from",
        ),
        Place(
            "requests/utils.py",
            251,
            "config",
            "~/.netrc, then ~/_netrc: the same file's default, when NETRC is unset",
        ),
        Place(
            "requests/sessions.py",
            857,
            "config",
            "REQUESTS_CA_BUNDLE: the CA bundle requests verify servers with",
        ),
        Place(
            "requests/sessions.py",
            858,
            "config",
            "CURL_CA_BUNDLE: the same, when REQUESTS_CA_BUNDLE is unset",
        ),
        Place(
            "requests/utils.py",
            319,
            "throwaway",
            "mkstemp(): extract_zipped_paths() copies a zip member out, never removed",
        ),
    ),
    "tensorboardx": (
        Place(
            "tensorboardX/writer.py",
            330,
            "output",
            "SummaryWriter(logdir=None): event files in runs/<date>_<host><comment> in the cwd",
        ),
        Place(
            "tensorboardX/summary.py",
            413,
            "throwaway",
            "NamedTemporaryFile(suffix='.gif', delete=False): make_video()'s GIF for moviepy",
        ),
    ),
    "tensorizer": (
        Place(
            "tensorizer/stream_io.py",
            48,
            "config",
            "~/.s3cfg: s3cmd's config, read for S3 credentials and endpoint",
        ),
        Place(
            "tensorizer/stream_io.py",
            53,
            "config",
            r"~\.s3cfg and ~\AppData\Roaming\s3cmd.ini: the same on Windows",
        ),
        Place(
            "tensorizer/stream_io.py",
            310,
            "uncached-download",
            "CURLStreamFile: an http(s):// or s3:// stream read through curl on every open",
        ),
        Place(
            "tensorizer/stream_io.py",
            677,
            "uncached-download",
            "RedisStreamFile: a redis:// stream's tensors read from Redis on every open",
        ),
        Place(
            "tensorizer/stream_io.py",
            1473,
            "throwaway",
            "NamedTemporaryFile(delete=False): an s3:// write staged locally, then uploaded",
        ),
    ),
}
