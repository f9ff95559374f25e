"""Where the corpus packages keep things on disk, found by reading their source.

The packages are the ``corpus = true`` wheels of ``wheels.toml``: what a vLLM-like CI pulls in
that no layout row comes from. Each entry below was found by reading the wheel's source (its
``os.environ``/``getenv`` reads, ``expanduser``/``Path.home()``, ``tempfile``, platformdirs and
appdirs calls, ``urlopen``/``urlretrieve``, ``__file__``, literal default directories), never by
running the audit. ``test_audit_corpus.py`` matches the audit's findings against them.

blobfile, datasets, outlines, speechbrain, torchmetrics and webdataset were held out
(``holdout_truth.py``) until the audit's misses on them were fixed; their truth is as it was
written then, but for outlines' ``HOME`` default, moved from the line that expands ``~`` to the
line where it enters the cache's path, as the rule below says.

What counts as one place: the line where a location is decided, that is where an environment
variable naming a place is read, or where a fixed base (HOME, the temporary directory, a
platform directory, the source file's directory, the working directory) enters a path the
package writes to, downloads into, reads its configuration from, or hands out as a place. A
second variable read on the same line is a second place. Not places: a path the caller passes
in, a subdirectory joined onto a place already listed, a temporary file made inside a place
already listed (``dir=``), read-only data beside the source, tool search paths (``PATH``,
``CLASSPATH``, ``WEKAHOME``), directories used only when they already exist (nltk's
``/usr/share/nltk_data``, imageio's ``sys.prefix/settings``), and locations that another
distribution decides (``hf_hub_download(cache_dir=None)``, ``torch.utils.cpp_extension.load``
with no ``build_directory``). Test, benchmark and example files inside the wheels are left out,
as the audit leaves them out.

Classes: ``cache`` kept from one run to the next; ``download`` files fetched from the network and
kept; ``uncached-download`` a URL read on every call and kept by nothing; ``output`` what a run
produces (logs, checkpoints, results); ``ipc`` files processes meet at; ``config``
configuration and credentials; ``throwaway`` a new temporary name on every run.
"""

from __future__ import annotations

from typing import NamedTuple


class Place(NamedTuple):
    """One place a careful reader finds: the file inside the wheel, the line, the class, why."""

    file: str
    line: int
    kind: str
    why: str


#: Per distribution (named as the audit names it), every place found in its source.
TRUTH: dict[str, tuple[Place, ...]] = {
    "accelerate": (
        Place(
            "accelerate/commands/config/config_args.py",
            30,
            "config",
            "HF_HOME: `accelerate config` writes default_config.yaml under $HF_HOME/accelerate",
        ),
        Place(
            "accelerate/commands/config/config_args.py",
            30,
            "config",
            "XDG_CACHE_HOME: the same config file's fallback, ~/.cache/huggingface/accelerate",
        ),
        Place(
            "accelerate/launchers.py",
            308,
            "ipc",
            "NamedTemporaryFile: the rendezvous file the debug launcher's processes meet at",
        ),
        Place(
            "accelerate/utils/launch.py",
            805,
            "ipc",
            "ACCELERATE_DEBUG_RDV_FILE: the same rendezvous file, a torch FileStore",
        ),
        Place(
            "accelerate/utils/modeling.py",
            1950,
            "throwaway",
            "mkdtemp(): a state dict offloaded to a fresh temporary directory",
        ),
        Place(
            "accelerate/utils/dataclasses.py",
            1247,
            "throwaway",
            "ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH: DeepSpeed's optimizer swap space",
        ),
        Place(
            "accelerate/utils/dataclasses.py",
            1252,
            "throwaway",
            "ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH: DeepSpeed's parameter swap space",
        ),
    ),
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
    "evaluate": (
        Place("evaluate/config.py", 117, "cache", "XDG_CACHE_HOME: base of the HF cache home"),
        Place("evaluate/config.py", 119, "cache", "HF_HOME: evaluate's caches live under it"),
        Place(
            "evaluate/config.py",
            122,
            "download",
            "HF_EVALUATE_CACHE: cached_path() downloads into it (utils/file_utils.py:421)",
        ),
        Place(
            "evaluate/config.py",
            125,
            "cache",
            "HF_METRICS_CACHE: a metric's arrow cache files and locks (module.py:215)",
        ),
        Place(
            "evaluate/config.py",
            128,
            "cache",
            "HF_MODULES_CACHE: the metric scripts fetched and imported as modules",
        ),
        Place(
            "evaluate/config.py",
            132,
            "download",
            "HF_DATASETS_DOWNLOADED_EVALUATE_PATH: where downloads are kept",
        ),
        Place(
            "evaluate/config.py",
            136,
            "download",
            "HF_DATASETS_EXTRACTED_EVALUATE_PATH: downloaded archives, extracted",
        ),
    ),
    "gdown": (
        Place(
            "gdown/cached_download.py",
            39,
            "download",
            "~/.cache/gdown: cached_download() keeps downloaded files there",
        ),
        Place(
            "gdown/download.py",
            44,
            "cache",
            "~/.cache/gdown/cookies.txt: Google Drive cookies saved and reused across runs",
        ),
        Place(
            "gdown/_vendor/_ytdlp_cookies.py",
            124,
            "throwaway",
            "TemporaryDirectory(): a copy of a browser's cookie database",
        ),
        Place(
            "gdown/_vendor/_ytdlp_cookies.py",
            282,
            "throwaway",
            "TemporaryDirectory(): a copy of a browser's cookie database",
        ),
    ),
    "imageio": (
        Place(
            "imageio/core/util.py",
            420,
            "download",
            "IMAGEIO_USERDIR: appdata_dir(), where get_remote_file() keeps fetched resources",
        ),
        Place("imageio/core/util.py", 422, "download", "appdata_dir()'s default: HOME"),
        Place("imageio/core/util.py", 424, "download", "/var/tmp when HOME is not a directory"),
        Place("imageio/core/util.py", 429, "download", "LOCALAPPDATA on Windows"),
        Place("imageio/core/util.py", 429, "download", "APPDATA on Windows"),
        Place(
            "imageio/core/util.py",
            432,
            "download",
            "~/Library/Application Support on macOS",
        ),
        Place(
            "imageio/core/fetching.py",
            66,
            "download",
            "appdata_dir('imageio'): the resources directory files are fetched into",
        ),
        Place(
            "imageio/core/request.py",
            520,
            "uncached-download",
            "urlopen(): an http/ftp URI is read every time it is opened",
        ),
        Place(
            "imageio/core/request.py",
            540,
            "throwaway",
            "mkstemp(): a local copy of a remote file",
        ),
        Place(
            "imageio/plugins/pillow_info.py",
            52,
            "uncached-download",
            "urlopen(url).read(): Pillow's docs page, read on every run of the script",
        ),
        Place(
            "imageio/plugins/pillow_info.py",
            103,
            "output",
            "open(__file__, 'wb'): the script writes the generated module over its own source",
        ),
        Place(
            "imageio/plugins/_tifffile.py",
            9263,
            "throwaway",
            "NamedTemporaryFile(dir=None): a memory-mapped output array in the temp directory",
        ),
    ),
    "joblib": (
        Place(
            "joblib/_memmapping_reducer.py",
            209,
            "throwaway",
            "JOBLIB_TEMP_FOLDER: the per-pool memmapping folder (named after pid and a uuid)",
        ),
        Place(
            "joblib/_memmapping_reducer.py",
            219,
            "throwaway",
            "/dev/shm: the same per-pool folder on the shared-memory file system",
        ),
        Place(
            "joblib/_memmapping_reducer.py",
            230,
            "throwaway",
            "tempfile.gettempdir(): the same per-pool folder's last fallback",
        ),
    ),
    "kagglehub": (
        Place(
            "kagglehub/config.py",
            17,
            "download",
            "~/.cache/kagglehub: models and datasets downloaded",
        ),
        Place(
            "kagglehub/config.py",
            19,
            "config",
            "~/.kaggle: the credentials folder (kaggle.json)",
        ),
        Place("kagglehub/config.py", 62, "download", "KAGGLEHUB_CACHE: moves the download cache"),
        Place("kagglehub/config.py", 133, "config", "KAGGLE_CONFIG_DIR: moves the credentials"),
        Place(
            "kagglehub/logger.py",
            44,
            "output",
            "KAGGLE_LOGGING_ROOT_DIR (default HOME): .kaggle/logs/kagglehub.log",
        ),
        Place(
            "kagglehub/gcs_upload.py",
            224,
            "throwaway",
            "TemporaryDirectory(): an upload's staging",
        ),
        Place(
            "kagglehub/packages.py",
            238,
            "throwaway",
            "NamedTemporaryFile(delete=False): the log of a package's dependency install",
        ),
    ),
    "librosa": (
        Place(
            "librosa/_cache.py",
            86,
            "cache",
            "LIBROSA_CACHE_DIR: joblib Memory cache of computed features",
        ),
        Place(
            "librosa/util/files.py",
            31,
            "download",
            "LIBROSA_DATA_DIR, default pooch.os_cache('librosa'): example audio fetched",
        ),
    ),
    "nltk": (
        Place(
            "nltk/data.py",
            276,
            "download",
            "APPDATA/nltk_data: a data path on Windows (downloads go to the first writable)",
        ),
        Place("nltk/data.py", 295, "download", "NLTK_DATA: the data paths, first writable one"),
        Place("nltk/data.py", 298, "download", "~/nltk_data: the user's data path"),
        Place(
            "nltk/data.py",
            425,
            "throwaway",
            "make_staging_dir(): fresh scratch directories created under the first data path",
        ),
        Place(
            "nltk/downloader.py",
            1962,
            "download",
            "APPDATA: default_download_dir() on Windows",
        ),
        Place(
            "nltk/downloader.py",
            1966,
            "download",
            "~/ + nltk_data: default_download_dir() elsewhere",
        ),
        Place(
            "nltk/twitter/util.py",
            40,
            "config",
            "TWITTER: the directory the Twitter credentials file is read from",
        ),
        Place(
            "nltk/twitter/util.py",
            130,
            "config",
            "credentials2.txt beside the source: an OAuth2 token is appended to it",
        ),
        Place(
            "nltk/twitter/util.py",
            155,
            "output",
            "guess_path(): a relative directory for tweets is put under HOME",
        ),
        Place(
            "nltk/data.py",
            2050,
            "uncached-download",
            "an http(s)/ftp resource URL is opened on every load",
        ),
        Place(
            "nltk/downloader.py",
            1813,
            "uncached-download",
            "the data index is fetched into memory, not kept on disk",
        ),
    ),
    "open-clip-torch": (
        Place(
            "open_clip/pretrained.py",
            795,
            "download",
            "~/.cache/clip: pretrained weights downloaded from a URL",
        ),
        Place(
            "open_clip_train/params.py",
            113,
            "output",
            "--logs default ./logs/: training logs and checkpoints in the working directory",
        ),
        Place(
            "open_clip/tokenizer.py",
            590,
            "throwaway",
            "NamedTemporaryFile(): a vocabulary file copied for the tokenizer",
        ),
        Place(
            "open_clip/push_to_hf_hub.py",
            128,
            "throwaway",
            "TemporaryDirectory(): files staged for an upload",
        ),
    ),
    # peft decides no location of its own: it downloads through huggingface_hub with the
    # caller's cache_dir, and boft/layer.py's cpp_extension.load() builds where torch decides.
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
            "outlines/caching.py", 65, "cache", "HOME/.cache/outlines: when XDG_CACHE_HOME is unset"
        ),
        Place(
            "outlines/caching.py",
            68,
            "cache",
            "gettempdir()/.cache/outlines: when HOME is /",
        ),
    ),
    "peft": (),
    "pooch": (
        Place(
            "pooch/utils.py",
            103,
            "download",
            "os_cache(): platformdirs.user_cache_dir(project), the default home of fetched data",
        ),
        Place(
            "pooch/core.py",
            218,
            "download",
            "retrieve() with no path: os_cache('pooch')",
        ),
    ),
    "sacrebleu": (
        Place(
            "sacrebleu/utils.py",
            26,
            "download",
            "SACREBLEU, default ~/.sacrebleu: test sets and SentencePiece models downloaded",
        ),
        Place(
            "sacrebleu/dataset/__main__.py",
            29,
            "uncached-download",
            "every test set URL read into memory to check its md5",
        ),
    ),
    "seaborn": (
        Place(
            "seaborn/utils.py",
            517,
            "download",
            "SEABORN_DATA, default user_cache_dir('seaborn'): example datasets downloaded",
        ),
        Place(
            "seaborn/external/appdirs.py",
            109,
            "download",
            "user_cache_dir() on Windows: CSIDL_LOCAL_APPDATA (its one caller keeps datasets)",
        ),
        Place(
            "seaborn/external/appdirs.py",
            118,
            "download",
            "user_cache_dir() on macOS: ~/Library/Caches",
        ),
        Place(
            "seaborn/external/appdirs.py",
            122,
            "download",
            "user_cache_dir() elsewhere: XDG_CACHE_HOME, default ~/.cache",
        ),
        Place(
            "seaborn/utils.py",
            499,
            "uncached-download",
            "get_dataset_names(): the list of datasets fetched on every call",
        ),
        Place(
            "seaborn/utils.py",
            579,
            "uncached-download",
            "load_dataset(cache=False): the CSV read from its URL on every call",
        ),
        Place(
            "seaborn/miscplot.py",
            40,
            "uncached-download",
            "dogplot(): an image fetched into memory on every call",
        ),
    ),
    "sentence-transformers": (
        Place(
            "sentence_transformers/base/model.py",
            205,
            "download",
            "SENTENCE_TRANSFORMERS_HOME: the cache_folder models are downloaded into",
        ),
        Place(
            "sentence_transformers/sentence_transformer/modules/word_embeddings.py",
            166,
            "download",
            "http_get(url, name): word embeddings downloaded into the working directory",
        ),
        Place(
            "sentence_transformers/backend/utils.py",
            220,
            "throwaway",
            "TemporaryDirectory(): an exported model staged",
        ),
        Place(
            "sentence_transformers/base/model.py",
            1126,
            "throwaway",
            "TemporaryDirectory(): a model staged for an upload",
        ),
        Place(
            "sentence_transformers/cross_encoder/fit_mixin.py",
            289,
            "output",
            "checkpoints/model in the working directory: fit()'s default checkpoints",
        ),
        Place(
            "sentence_transformers/cross_encoder/fit_mixin.py",
            292,
            "output",
            "checkpoints/model_{idx}: the same, when the first is taken",
        ),
        Place(
            "sentence_transformers/sentence_transformer/fit_mixin.py",
            297,
            "output",
            "checkpoints/model in the working directory: fit()'s default checkpoints",
        ),
        Place(
            "sentence_transformers/sentence_transformer/fit_mixin.py",
            300,
            "output",
            "checkpoints/model_{idx}: the same, when the first is taken",
        ),
        Place(
            "sentence_transformers/base/trainer.py",
            195,
            "output",
            "tmp_trainer in the working directory: the trainer's output without args",
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
    "timm": (
        Place(
            "timm/models/_hub.py",
            64,
            "download",
            "torch.hub.get_dir()/checkpoints: pretrained weights downloaded",
        ),
        Place(
            "timm/models/_hub.py",
            516,
            "throwaway",
            "TemporaryDirectory(): files staged for a push to the Hub",
        ),
    ),
    "tldextract": (
        Place(
            "tldextract/cache.py",
            61,
            "cache",
            "TLDEXTRACT_CACHE: the JSON disk cache (the fetched suffix list among it)",
        ),
        Place(
            "tldextract/cache.py",
            65,
            "cache",
            "XDG_CACHE_HOME/python-tldextract: the cache's default",
        ),
        Place("tldextract/cache.py", 67, "cache", "HOME/.cache: when XDG_CACHE_HOME is unset"),
        Place(
            "tldextract/cache.py",
            77,
            "cache",
            ".suffix_cache beside the source: the last fallback",
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


#: The seed pull request's test files as the pinned vLLM sdist has them (``[[sdist]]`` in
#: ``wheels.toml``), read by hand the same way; paths as in vLLM's repository. Test code is
#: audited here (it is what the seed fixed), so a test that sets a layout variable is a place.
SEED = "vllm-seed-tests"
SEED_TRUTH: dict[str, tuple[Place, ...]] = {
    SEED: (
        Place(
            "tests/conftest.py",
            233,
            "ipc",
            "mkstemp(): the FileStore file the distributed test processes meet at (file://)",
        ),
        Place(
            "tests/conftest.py",
            1537,
            "download",
            "$TMPDIR/dummy_opt: snapshot_download(local_dir=) when it does not exist yet",
        ),
        Place("tests/conftest.py", 1538, "download", "$TMPDIR/dummy_llava: the same"),
        Place("tests/conftest.py", 1539, "download", "$TMPDIR/dummy_gemma2_embedding: the same"),
        Place(
            "tests/conftest.py",
            1868,
            "throwaway",
            "TemporaryDirectory(): fresh_vllm_cache's directory",
        ),
        Place(
            "tests/conftest.py",
            1869,
            "layout-override",
            "monkeypatch.setenv('VLLM_CACHE_ROOT', tmp_dir): the layout's cache root replaced",
        ),
        Place(
            "tests/entrypoints/openai/completion/test_token_in_token_out.py",
            14,
            "download",
            "$TMPDIR/qwen3_06b: download_weights_from_hf(cache_dir=) in the server fixture",
        ),
        Place(
            "tests/evals/gpt_oss/test_gpqa_correctness.py",
            31,
            "download",
            "data/ beside the source: tiktoken files urlretrieve()d, handed to the server",
        ),
        Place(
            "tests/evals/gsm8k/gsm8k_eval.py",
            29,
            "download",
            "$TMPDIR/<name of the URL>: GSM8K fetched with requests and written there",
        ),
        Place(
            "tests/plugins/prithvi_io_processor_plugin/prithvi_io_processor/prithvi_processor.py",
            65,
            "output",
            "prediction.tiff in the working directory: the output written there",
        ),
        Place(
            "tests/plugins/prithvi_io_processor_plugin/prithvi_io_processor/prithvi_processor.py",
            72,
            "throwaway",
            "NamedTemporaryFile(): an output GeoTIFF encoded through a temporary file",
        ),
        Place(
            "tests/plugins/prithvi_io_processor_plugin/prithvi_io_processor/prithvi_processor.py",
            117,
            "uncached-download",
            "urlopen(file_path): a GeoTIFF URL fetched on every request, kept by nothing",
        ),
        Place(
            "tests/plugins/prithvi_io_processor_plugin/prithvi_io_processor/prithvi_processor.py",
            133,
            "throwaway",
            "NamedTemporaryFile(): the fetched bytes written to a temporary file to be read",
        ),
        Place(
            "tests/v1/kv_connector/extract_hidden_states_integration/test_extraction.py",
            63,
            "download",
            "~/.cache/huggingface: from_pretrained(cache_dir=) with the hub's path written out",
        ),
        Place(
            "tests/v1/kv_connector/extract_hidden_states_integration/test_extraction.py",
            315,
            "throwaway",
            "mkdtemp(): the connector's shared_storage_path for one test",
        ),
    ),
}
