"""Where each real dataset comes from: its files, their checksums, sizes and official URLs.

Every checksum below names where its value comes from (``Checksum.source``); none was
invented. Three kinds occur:

* **published by the dataset's authors** — the MD5 sums on the CIFAR page and in the
  Fashion-MNIST README (also the ones torchvision checks);
* **recorded by torchvision** (``torchvision/datasets/{mnist,cifar,stl10}.py``, 0.29.1) — MD5;
* **SHA-256 recorded independently by several public projects** for the very same official
  files (e.g. Keras' ``cifar10.py``/``cifar100.py`` ``file_hash``; many MNIST, Fashion-MNIST and
  Adult download scripts) — given where the authors publish no SHA-256.

Where nothing is known (Purchase-100 and Texas-100: the archives of Shokri et al. have no
published checksum) the file carries no checksum and ``verify`` reports it as *unverified
(no published checksum)* instead of pretending.

The description types (:class:`~bench.data.files.Source`, layouts, files, checksums) and the
layouts a dataset may be stored in are those of :mod:`bench.data.files`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from bench.core.errors import BenchInputError
from bench.data.files import Checksum, DataFile, Layout, Source

# --- provenance labels of the checksums -------------------------------------------------------
_TV = "torchvision 0.29.1 (torchvision/datasets/{})"
_SHA_MNIST = (
    "SHA-256 of the canonical MNIST files, recorded identically by many independent projects "
    "(e.g. guild.ai's MNIST example, Go/Rust/Ruby MNIST loaders); not published by LeCun et al."
)
_SHA_MNIST_RAW = (
    "SHA-256 of the decompressed canonical MNIST IDX files, recorded by several independent projects"
)
_MD5_FASHION = "Fashion-MNIST README (Zalando Research; the MD5 torchvision checks)"
_SHA_FASHION = (
    "SHA-256 of the official Fashion-MNIST files, recorded identically by several projects "
    "(e.g. Flux.jl, batchup); Zalando publishes MD5 only"
)
_SHA_FASHION_RAW = (
    "SHA-256/MD5 of the decompressed official Fashion-MNIST IDX files, recorded by several "
    "projects; equal to the payload of Debian's dataset-fashion-mnist 0.0~git20200523.55506a9-1"
)
_MD5_CIFAR = "CIFAR page (www.cs.toronto.edu/~kriz/cifar.html) and torchvision/datasets/cifar.py"
_SHA_CIFAR = "Keras (keras/datasets/{}.py, file_hash); the CIFAR page publishes MD5 only"
_SHA_ADULT = (
    "SHA-256 recorded identically by many independent projects (e.g. PreprocessData.jl); "
    "UCI publishes no checksum"
)


# --- MNIST and Fashion-MNIST (IDX, gzipped) ---------------------------------------------------

#: the four files of an IDX dataset (MNIST, Fashion-MNIST), without their ``.gz``
IDX_STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def _idx_source(
    name: str,
    title: str,
    homepage: str,
    mirrors: tuple[str, ...],
    gz: Mapping[str, tuple[str | None, str | None, int | None]],
    raw: Mapping[str, tuple[str | None, str | None]],
    sources: tuple[str, str, str, str],
    **extra: object,
) -> Source:
    """An IDX dataset: a ``gz`` layout (``{stem}.gz``: sha256, md5, size) and a ``raw`` layout
    (uncompressed ``{stem}``: sha256, md5); ``sources`` label the gz sha256, gz md5, raw sha256
    and raw md5 values."""
    src_gz_sha, src_gz_md5, src_raw_sha, src_raw_md5 = sources
    gz_files = []
    raw_files = []
    for stem in IDX_STEMS:
        sha, md5, size = gz[stem]
        raw_sha, raw_md5 = raw.get(stem, (None, None))
        sums: list[Checksum] = []
        if sha:
            sums.append(Checksum("sha256", sha, source=src_gz_sha))
        if md5:
            sums.append(Checksum("md5", md5, source=src_gz_md5))
        payload: list[Checksum] = []
        if raw_sha:
            payload.append(Checksum("sha256", raw_sha, "gunzip", src_raw_sha))
        if raw_md5:
            payload.append(Checksum("md5", raw_md5, "gunzip", src_raw_md5))
        gz_files.append(
            DataFile(f"{stem}.gz", (*sums, *payload), size, tuple(m + stem + ".gz" for m in mirrors))
        )
        raw_files.append(DataFile(stem, tuple(replace(c, of="file") for c in payload)))
    layouts = (Layout("gz", tuple(gz_files)), Layout("raw", tuple(raw_files)))
    return Source(name, title, homepage, layouts, **extra)  # type: ignore[arg-type]


MNIST = _idx_source(
    "mnist",
    "MNIST handwritten digits (LeCun et al. 1998): 60k/10k 28x28 grey images, 10 classes",
    "http://yann.lecun.com/exdb/mnist/",
    (
        "https://ossci-datasets.s3.amazonaws.com/mnist/",
        "https://storage.googleapis.com/cvdf-datasets/mnist/",
        "http://yann.lecun.com/exdb/mnist/",
    ),
    {
        "train-images-idx3-ubyte": (
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
            "f68b3c2dcbeaaa9fbdd348bbdeb94873",
            9912422,
        ),
        "train-labels-idx1-ubyte": (
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
            "d53e105ee54ea40749a09fcbcd1e9432",
            28881,
        ),
        "t10k-images-idx3-ubyte": (
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
            "9fb629c4189551a2d022fa330f9573f3",
            1648877,
        ),
        "t10k-labels-idx1-ubyte": (
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
            "ec29112dd5afa0611ce80d1b7f02629c",
            4542,
        ),
    },
    {
        "train-images-idx3-ubyte": ("ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db", None),
        "train-labels-idx1-ubyte": ("65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5", None),
        "t10k-images-idx3-ubyte": ("0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7", None),
        "t10k-labels-idx1-ubyte": ("ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2", None),
    },
    (_SHA_MNIST, _TV.format("mnist.py"), _SHA_MNIST_RAW, ""),
)

FASHION_MNIST = _idx_source(
    "fashion_mnist",
    "Fashion-MNIST (Xiao et al. 2017): 60k/10k 28x28 grey images of clothing, 10 classes",
    "https://github.com/zalandoresearch/fashion-mnist",
    (
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
        "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/",
    ),
    {
        "train-images-idx3-ubyte": (
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
            "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
            26421880,
        ),
        "train-labels-idx1-ubyte": (
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
            "25c81989df183df01b3e8a0aad5dffbe",
            29515,
        ),
        "t10k-images-idx3-ubyte": (
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
            "bef4ecab320f06d8554ea6380940ec79",
            4422102,
        ),
        "t10k-labels-idx1-ubyte": (
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
            "bb300cfdad3c16e7a12a480ee83cd310",
            5148,
        ),
    },
    {
        "train-images-idx3-ubyte": (
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
            "f4a8712d7a061bf5bd6d2ca38dc4d50a",
        ),
        "train-labels-idx1-ubyte": (
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
            "9018921c3c673c538a1fc5bad174d6f9",
        ),
        "t10k-images-idx3-ubyte": (
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
            "8181f5470baa50b63fa0f6fddb340f0a",
        ),
        "t10k-labels-idx1-ubyte": (
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
            "15d484375f8d13e6eb1aabb0c3f46965",
        ),
    },
    (_SHA_FASHION, _MD5_FASHION, _SHA_FASHION_RAW, _SHA_FASHION_RAW),
    system_package="dataset-fashion-mnist",
    system_dirs=(
        "/usr/share/datasets/fashion-mnist",
        "/usr/share/dataset-fashion-mnist",
        "/usr/share/fashion-mnist",
        "/usr/local/share/datasets/fashion-mnist",
    ),
    notes="Also read from a system copy: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).",
)


# --- CIFAR-10/100 (python pickles in a tar.gz) -------------------------------------------------


def _cifar_source(
    name: str,
    title: str,
    archive: str,
    sha256: str,
    md5: str,
    size: int,
    folder: str,
    members: Mapping[str, str],
) -> Source:
    url = f"https://www.cs.toronto.edu/~kriz/{archive}"
    sums = (
        Checksum("sha256", sha256, source=_SHA_CIFAR.format(name)),
        Checksum("md5", md5, source=_MD5_CIFAR),
    )
    extracted = tuple(
        DataFile(f"{folder}/{m}", (Checksum("md5", d, source=_TV.format("cifar.py")),))
        for m, d in members.items()
    )
    archive_file = DataFile(archive, sums, size, (url,), tuple(f"{folder}/{m}" for m in members))
    return Source(
        name,
        title,
        "https://www.cs.toronto.edu/~kriz/cifar.html",
        (Layout("archive", (archive_file,)), Layout("extracted", extracted)),
    )


CIFAR10 = _cifar_source(
    "cifar10",
    "CIFAR-10 (Krizhevsky 2009): 50k/10k 32x32 colour images, 10 classes (python version)",
    "cifar-10-python.tar.gz",
    "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce",
    "c58f30108f718f92721af3b95e74349a",
    170498071,
    "cifar-10-batches-py",
    {
        "data_batch_1": "c99cafc152244af753f735de768cd75f",
        "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
        "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
        "data_batch_4": "634d18415352ddfa80567beed471001a",
        "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
        "test_batch": "40351d587109b95175f43aff81a1287e",
        "batches.meta": "5ff9c542aee3614f3951f8cda6e48888",
    },
)

CIFAR100 = _cifar_source(
    "cifar100",
    "CIFAR-100 (Krizhevsky 2009): 50k/10k 32x32 colour images, 100 classes (python version)",
    "cifar-100-python.tar.gz",
    "85cd44d02ba6437773c5bbd22e183051d648de2e7d6b014e1ef29b855ba677a7",
    "eb9058c3a382ffc7106e4002c42a8d85",
    169001437,
    "cifar-100-python",
    {
        "train": "16019d7e3df5f24257cddd939b257f8d",
        "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
        "meta": "7973b15100ade9c7d40fb424638fde48",
    },
)

# --- STL-10 (optional; binary arrays in a 2.6 GB tar.gz) ---------------------------------------

_STL_MD5 = {
    "train_X.bin": "918c2871b30a85fa023e0c44e0bee87f",
    "train_y.bin": "5a34089d4802c674881badbb80307741",
    "test_X.bin": "7f263ba9f9e0b06b93213547f721ac82",
    "test_y.bin": "36f9794fa4beb8a2c72628de14fa638e",
}

STL10 = Source(
    "stl10",
    "STL-10 (Coates et al. 2011): 5k/8k labelled 96x96 colour images, 10 classes (optional)",
    "https://cs.stanford.edu/~acoates/stl10/",
    (
        Layout(
            "archive",
            (
                DataFile(
                    "stl10_binary.tar.gz",
                    (Checksum("md5", "91f7769df0f17e558f3565bffb0c7dfb", source=_TV.format("stl10.py")),),
                    None,
                    ("http://ai.stanford.edu/~acoates/stl10/stl10_binary.tar.gz",),
                    tuple(f"stl10_binary/{m}" for m in _STL_MD5),
                ),
            ),
        ),
        Layout(
            "extracted",
            tuple(
                DataFile(f"stl10_binary/{m}", (Checksum("md5", d, source=_TV.format("stl10.py")),))
                for m, d in _STL_MD5.items()
            ),
        ),
    ),
)

# --- Purchase-100 and Texas-100 (Shokri et al. 2017's archives) --------------------------------

PURCHASE100 = Source(
    "purchase100",
    "Purchase-100 (Shokri et al. 2017): 197,324 shoppers, 600 binary features, 100 classes",
    "https://github.com/privacytrustlab/datasets",
    (
        Layout(
            "archive",
            (
                DataFile(
                    "dataset_purchase.tgz",
                    (),
                    None,
                    (
                        "https://www.comp.nus.edu.sg/~reza/files/dataset_purchase.tgz",
                        "https://github.com/privacytrustlab/datasets/raw/master/dataset_purchase.tgz",
                    ),
                    ("dataset_purchase",),
                ),
            ),
        ),
        Layout("extracted", (DataFile("dataset_purchase"),)),
    ),
    notes="No published checksum: files are checked for their format only.",
)

TEXAS100 = Source(
    "texas100",
    "Texas-100 (Shokri et al. 2017): 67,330 hospital stays, 6,169 binary features, 100 classes",
    "https://github.com/privacytrustlab/datasets",
    (
        Layout(
            "archive",
            (
                DataFile(
                    "dataset_texas.tgz",
                    (),
                    None,
                    (
                        "https://www.comp.nus.edu.sg/~reza/files/dataset_texas.tgz",
                        "https://github.com/privacytrustlab/datasets/raw/master/dataset_texas.tgz",
                    ),
                    ("texas/100/feats", "texas/100/labels"),
                ),
            ),
        ),
        Layout("extracted", (DataFile("texas/100/feats"), DataFile("texas/100/labels"))),
    ),
    notes="No published checksum: files are checked for their format only.",
)

# --- Adult (UCI census income) -------------------------------------------------------------------

_UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/"

ADULT = Source(
    "adult",
    "Adult / census income (UCI; Kohavi 1996): 32,561 + 16,281 people, income > 50K",
    "https://archive.ics.uci.edu/dataset/2/adult",
    (
        Layout(
            "files",
            (
                DataFile(
                    "adult.data",
                    (
                        Checksum(
                            "sha256",
                            "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
                            source=_SHA_ADULT,
                        ),
                    ),
                    3974305,
                    (_UCI + "adult.data",),
                ),
                DataFile(
                    "adult.test",
                    (
                        Checksum(
                            "sha256",
                            "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
                            source=_SHA_ADULT,
                        ),
                    ),
                    None,
                    (_UCI + "adult.test",),
                ),
            ),
        ),
    ),
)

SOURCES: dict[str, Source] = {
    s.name: s for s in (MNIST, FASHION_MNIST, CIFAR10, CIFAR100, STL10, PURCHASE100, TEXAS100, ADULT)
}


def get_source(name: str) -> Source:
    """The :class:`Source` of real dataset ``name`` (a :class:`BenchInputError` if unknown)."""
    try:
        return SOURCES[name]
    except KeyError:
        raise BenchInputError("dataset", name, choices=SOURCES, reason="not a downloadable dataset") from None
