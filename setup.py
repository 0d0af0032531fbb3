"""Maps the top-level folders kernels/, lm/ and decoders/ into the asrkit namespace.

pyproject.toml holds all metadata; this file only computes the package list, because setuptools'
static `package-dir` table would have to name every subpackage by hand.
"""

from setuptools import find_packages, setup

NAMESPACED = ("kernels", "lm", "decoders")  # folder -> asrkit.<folder>

packages = find_packages(include=["asrkit", "asrkit.*"])
package_dir = {"asrkit": "asrkit"}
for folder in NAMESPACED:
    package_dir[f"asrkit.{folder}"] = folder
    packages.append(f"asrkit.{folder}")
    packages += [f"asrkit.{folder}.{sub}" for sub in find_packages(where=folder)]

setup(packages=packages, package_dir=package_dir)
