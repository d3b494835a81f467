"""paddle_flashmask: FlashMask attention (column-wise sparse masks) for PaddlePaddle and PyTorch."""
from pathlib import Path

from setuptools import find_packages, setup

here = Path(__file__).parent
version = {}
for line in (here / "paddle_flashmask" / "__init__.py").read_text().splitlines():
    if line.startswith("__version__"):
        exec(line, version)

setup(
    name="paddle_flashmask",
    version=version["__version__"],
    description="FlashMask attention with CuTe DSL Hopper kernels for PaddlePaddle and PyTorch",
    long_description=(here / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["paddle_flashmask", "paddle_flashmask.*"]),
    install_requires=["numpy"],
    extras_require={
        # GPU users install paddlepaddle-gpu from Paddle's own index; the registry's is an old 2.6.
        "paddle": ["paddlepaddle>=3.0"],
        "torch": ["torch>=2.4"],
        "gpu": ["nvidia-cutlass-dsl[cu13]>=4.8"],
        "render": ["pillow"],
        "paddleformers": ["paddleformers==1.2.0", "pyarrow==21.0.0"],
        "paddlenlp": ["paddlenlp==3.0.0b4", "pyarrow==21.0.0", "aistudio-sdk==0.2.6"],
        "test": ["pytest>=8", "hypothesis>=6", "pillow", "nvidia-cuda-nvdisasm"],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "License :: OSI Approved :: Apache Software License",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
