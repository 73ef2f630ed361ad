"""Review follow-ups of the scheduling CLI and loaders (DEVELOPERS.md "Bad input": one line naming
the field, the value and the fix, exit 2, checked before any long work; "Nothing saved is lost").

- `simulate/compare --plot DIR` refuse an unusable folder before simulating: the refusal is an
  InputError (exit 2), whereas after a simulation the plot writer would fail with a traceback;
- cluster YAML and workload files are read through gpuwise.user_files, so a folder or a binary
  file is refused with the file named.
"""

from __future__ import annotations

import json

import pytest

from gpuwise.cli.main import main
from gpuwise.errors import InputError
from gpuwise.hardware.cluster import load_cluster
from gpuwise.workload.traces import load_workload

SMALL = "examples/workloads/small.csv"
HETERO = "examples/clusters/hetero-t4-v100-a100.yaml"


@pytest.mark.parametrize("cmd", ["simulate", "compare"])
def test_plot_target_that_is_a_file_is_refused_before_simulating(cmd, tmp_path, capsys):
    target = tmp_path / "plots"
    target.write_text("a user's file, not a folder")
    rc = main([cmd, "--workload", SMALL, "--cluster", HETERO, "--policy", "fifo", "--plot", str(target)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--plot" in err and "is a file" in err and "Traceback" not in err
    assert target.read_text() == "a user's file, not a folder"  # nothing saved is lost


def test_plot_folder_under_a_file_and_image_names_are_refused(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert main(["simulate", "--workload", SMALL, "--cluster", HETERO, "--policy", "fifo",
                 "--plot", str(tmp_path / "f" / "sub")]) == 2
    assert "cannot be created" in capsys.readouterr().err
    assert main(["simulate", "--workload", SMALL, "--cluster", HETERO, "--policy", "fifo",
                 "--plot", str(tmp_path / "jct.png")]) == 2
    assert "not an image file name" in capsys.readouterr().err


def test_plot_folder_is_created_and_filled(tmp_path, capsys):
    out = tmp_path / "new" / "plots"
    assert main(["simulate", "--workload", SMALL, "--cluster", HETERO, "--policy", "fifo",
                 "--plot", str(out), "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["plots"]
    assert sorted(p.rsplit("/", 1)[-1] for p in files) == ["gpus_in_use.png", "jct_cdf.png", "queue_length.png"]


def test_cluster_and_workload_files_that_are_folders_or_binary_name_the_file(tmp_path):
    blob = tmp_path / "blob.yaml"
    blob.write_bytes(b"\xff\xfe\x00binary")
    for bad, what in ((tmp_path, "folder"), (blob, "UTF-8")):
        with pytest.raises(InputError, match=what) as e:
            load_cluster(bad)
        assert str(bad) in str(e.value) and "--cluster" in str(e.value)
    csv = tmp_path / "blob.csv"
    csv.write_bytes(b"name,time\n\xff\xfe\x00")
    for bad, what in ((tmp_path, "folder"), (csv, "UTF-8"), (blob, "UTF-8")):
        with pytest.raises(InputError, match=what) as e:
            load_workload(bad)
        assert str(bad) in str(e.value) and "--workload" in str(e.value)
