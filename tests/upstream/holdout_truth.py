"""Where the held-out packages keep things on disk, found by reading their source.

The packages are the ``holdout = true`` wheels of ``wheels.toml``: more of what a vLLM-like CI
pulls in (datasets, evaluation metrics, speech, structured generation, serving metrics, storage
clients, HTTP clients, a grammar parser, pickling, tensor streaming, training logs), none of them
in the measured corpus of ``corpus_truth.py``. Their truth below was written from the wheels'
sources by hand and committed before the audit was ever run on them, so that measuring the audit
on them says how it does on code nobody tuned it to.

The rules are ``corpus_truth.py``'s (its module docstring): what one place is, what is not a
place, the classes, and that test, benchmark and example files inside the wheels are left out.
A wheel with no place of its own has an empty tuple, as peft does there.
"""

from __future__ import annotations

from .corpus_truth import Place

#: Per distribution (named as the audit names it), every place found in its source.
HOLDOUT: dict[str, tuple[Place, ...]] = {
    "blobfile": (
        Place(
            "blobfile/_azure.py",
            95,
            "config",
            "AZURE_APPLICATION_CREDENTIALS: the service principal's credentials file",
        ),
        Place(
            "blobfile/_azure.py",
            118,
            "config",
            "~/.azure/msal_token_cache.json: the az CLI's refresh token, read",
        ),
        Place(
            "blobfile/_azure.py",
            135,
            "config",
            "~/.azure/azureProfile.json: the az CLI's subscriptions, read",
        ),
        Place(
            "blobfile/_gcp.py",
            112,
            "config",
            "GOOGLE_APPLICATION_CREDENTIALS: the Google credentials file",
        ),
        Place(
            "blobfile/_gcp.py",
            122,
            "config",
            "APPDATA: gcloud/application_default_credentials.json on Windows",
        ),
        Place(
            "blobfile/_gcp.py",
            126,
            "config",
            "HOME: .config/gcloud/application_default_credentials.json elsewhere",
        ),
        Place(
            "blobfile/_common.py",
            688,
            "ipc",
            "~/.blobfile/<name>_tokens.lock: the FileLock processes take to write the tokens",
        ),
        Place(
            "blobfile/_common.py",
            689,
            "cache",
            "~/.blobfile/<name>_tokens.json: access tokens saved and reused across runs",
        ),
        Place(
            "blobfile/_context.py",
            971,
            "throwaway",
            "mkdtemp(): a local copy of a remote blob opened for appending",
        ),
        Place(
            "blobfile/_context.py",
            977,
            "throwaway",
            "mkdtemp(): a local copy of a remote blob read without cache_dir",
        ),
        Place(
            "blobfile/_context.py",
            1049,
            "throwaway",
            "mkdtemp(): a remote blob written locally first, then uploaded",
        ),
        Place(
            "blobfile/_gcp.py",
            431,
            "uncached-download",
            "StreamingReadFile: a GCS object's bytes read on every read, kept by nothing",
        ),
        Place(
            "blobfile/_azure.py",
            1028,
            "uncached-download",
            "StreamingReadFile: an Azure blob's bytes read on every read, kept by nothing",
        ),
    ),
    "datasets": (
        Place("datasets/config.py", 156, "cache", "XDG_CACHE_HOME: base of the HF cache home"),
        Place("datasets/config.py", 158, "cache", "HF_HOME: datasets' caches live under it"),
        Place(
            "datasets/config.py",
            161,
            "cache",
            "HF_DATASETS_CACHE: prepared Arrow datasets and map()/filter() cache files",
        ),
        Place(
            "datasets/config.py",
            164,
            "cache",
            "HF_MODULES_CACHE: read and handed out as config.HF_MODULES_CACHE (now unused)",
        ),
        Place(
            "datasets/config.py",
            168,
            "download",
            "HF_DATASETS_DOWNLOADED_DATASETS_PATH: cached_path() downloads into it",
        ),
        Place(
            "datasets/config.py",
            172,
            "download",
            "HF_DATASETS_EXTRACTED_DATASETS_PATH: downloaded archives, extracted",
        ),
        Place(
            "datasets/fingerprint.py",
            53,
            "throwaway",
            "TMPDIR: base of the temporary cache directory used when caching is disabled",
        ),
        Place("datasets/fingerprint.py", 53, "throwaway", "TEMP: the same, when TMPDIR is unset"),
        Place("datasets/fingerprint.py", 53, "throwaway", "TMP: the same, when TEMP is unset"),
        Place(
            "datasets/fingerprint.py",
            78,
            "throwaway",
            "mkdtemp(prefix='hf_datasets-'): that directory, in the default temp dir if none set",
        ),
        Place(
            "datasets/arrow_dataset.py",
            5945,
            "throwaway",
            "NamedTemporaryFile(delete=False): a Parquet shard staged for push_to_hub()",
        ),
        Place(
            "datasets/iterable_dataset.py",
            5076,
            "throwaway",
            "NamedTemporaryFile(delete=False): a Parquet shard staged for push_to_hub()",
        ),
        Place(
            "datasets/iterable_dataset.py",
            5096,
            "throwaway",
            "NamedTemporaryFile(delete=False): Parquet output shards staged for push_to_hub()",
        ),
        Place(
            "datasets/commands/test.py",
            165,
            "output",
            "`datasets-cli test --save_info` of a Hub dataset: ./<name>/README.md in the cwd",
        ),
        Place(
            "datasets/utils/file_utils.py",
            976,
            "uncached-download",
            "xopen(): streaming mode opens a remote file on every read, kept by nothing",
        ),
        Place(
            "datasets/utils/_dataset_viewer.py",
            35,
            "uncached-download",
            "the dataset viewer's list of exported Parquet files, fetched on every call",
        ),
        Place(
            "datasets/utils/_dataset_viewer.py",
            71,
            "uncached-download",
            "the dataset viewer's dataset infos, fetched on every call",
        ),
    ),
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
    "outlines": (
        Place(
            "outlines/caching.py",
            56,
            "cache",
            "OUTLINES_CACHE_DIR: the diskcache of generation results",
        ),
        Place(
            "outlines/caching.py",
            57,
            "cache",
            "XDG_CACHE_HOME/outlines: the cache's default",
        ),
        Place(
            "outlines/caching.py", 58, "cache", "HOME/.cache/outlines: when XDG_CACHE_HOME is unset"
        ),
        Place(
            "outlines/caching.py",
            68,
            "cache",
            "gettempdir()/.cache/outlines: when HOME is /",
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
    "speechbrain": (
        Place(
            "speechbrain/core.py",
            340,
            "throwaway",
            "TemporaryDirectory(): the checkpointer's directory in debug mode",
        ),
        Place(
            "speechbrain/lobes/models/discrete/dac.py",
            167,
            "download",
            "Path.home()/.cache/descript/dac: DAC weights downloaded and kept",
        ),
        Place(
            "speechbrain/integrations/nlp/flair_tagger.py",
            32,
            "download",
            "save_path='./model_checkpoints': from_hf() fetches the model into the cwd",
        ),
        Place(
            "speechbrain/utils/profiling.py",
            13,
            "output",
            "logdir='tensorboard_logs': prepare_profiler()'s default, traces in the cwd",
        ),
        Place(
            "speechbrain/utils/logger.py",
            180,
            "config",
            "config_path='log-config.yaml': setup_logging()'s default, read from the cwd",
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
    "torchmetrics": (
        Place(
            "torchmetrics/detection/helpers.py",
            476,
            "output",
            "tm_to_coco(): <name>_preds.json in the cwd (default name tm_map_input)",
        ),
        Place(
            "torchmetrics/detection/helpers.py",
            479,
            "output",
            "tm_to_coco(): <name>_target.json in the cwd",
        ),
        Place(
            "torchmetrics/functional/audio/dnsmos.py",
            45,
            "download",
            "~/.torchmetrics/DNSMOS: the DNSMOS ONNX models downloaded and kept",
        ),
        Place(
            "torchmetrics/functional/audio/nisqa.py",
            63,
            "download",
            "~/.torchmetrics/NISQA: the NISQA weights downloaded and kept",
        ),
        Place(
            "torchmetrics/functional/text/sacre_bleu.py",
            91,
            "download",
            "gettempdir()/torchmetrics-flores: the flores SentencePiece models downloaded",
        ),
        Place(
            "torchmetrics/functional/text/bert.py",
            210,
            "uncached-download",
            "urlopen(baseline_url): BERTScore's baseline read on every call",
        ),
    ),
    "webdataset": (
        Place(
            "webdataset/cache.py",
            20,
            "download",
            "WDS_CACHE, default ./_cache in the cwd: FileCache() keeps downloaded shards",
        ),
        Place(
            "webdataset/compat.py",
            438,
            "download",
            "WDS_CACHE: WebDataset()'s shard cache (only checked to exist: cache_dir is used)",
        ),
        Place(
            "webdataset/multi.py",
            87,
            "ipc",
            "prefix='/tmp/_multi-': MultiLoader's ZMQ ipc:// socket its workers push to",
        ),
        Place(
            "webdataset/autodecode.py",
            427,
            "throwaway",
            "TemporaryDirectory(): a video sample written out for torchvision to decode",
        ),
        Place(
            "webdataset/autodecode.py",
            451,
            "throwaway",
            "TemporaryDirectory(): an audio sample written out for torchaudio to decode",
        ),
        Place(
            "webdataset/gopen.py",
            268,
            "uncached-download",
            "gopen_curl(): an http(s) shard streamed through curl on every open",
        ),
        Place(
            "webdataset/gopen.py",
            303,
            "uncached-download",
            "gopen_htgs(): a htgs:// shard streamed through curl on every open",
        ),
        Place(
            "webdataset/gopen.py",
            355,
            "uncached-download",
            "gopen_hf(): an hf:// shard streamed through curl on every open",
        ),
        Place(
            "webdataset/gopen.py",
            383,
            "uncached-download",
            "gopen_gsutil(): a gs:// shard streamed through `gsutil cat` on every open",
        ),
        Place(
            "webdataset/gopen.py",
            417,
            "uncached-download",
            "gopen_ais(): an ais:// shard streamed through `ais get` on every open",
        ),
    ),
}
