"""Cluster specs and job streams: the bundled Pollux workloads (160 jobs each) and the Philly
trace (82,247 jobs) load; bad input gets one InputError naming the file, row and column."""

import pytest

from gpuwise.data import data_path
from gpuwise.errors import InputError
from gpuwise.hardware.cluster import cluster_from_dict, load_cluster, pollux_cluster
from gpuwise.workload.traces import check_fits, load_workload

HEADER = "name,time,application,num_replicas,batch_size\n"


def test_pollux_workload_loads():
    w = load_workload(data_path("pollux", "workloads", "workload-6.csv"))
    assert w.format == "pollux" and len(w) == 160
    assert w.jobs[0].name == "cifar10-0" and w.jobs[0].num_gpus == 6 and w.jobs[0].batch_size == 2048
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(w.jobs, w.jobs[1:]))


@pytest.mark.slow
def test_philly_loads_sorted():
    w = load_workload(data_path("pollux", "traces", "philly.csv"))
    assert w.format == "philly" and len(w) == 82247
    assert w.jobs[0].arrival_s == 0.0
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(w.jobs, w.jobs[1:]))
    assert all(j.rigid and j.duration_s > 0 for j in w.jobs[:1000])


def test_own_format_csv_and_yaml(tmp_path):
    w = load_workload("examples/workloads/small.csv")
    assert w.format == "gpuwise" and len(w) == 6
    assert w.jobs[2].rigid and w.jobs[2].duration_s == 1800
    assert w.jobs[3].min_batch == 16 and w.jobs[4].gpu_type == "T4"
    y = tmp_path / "jobs.yaml"
    y.write_text("jobs:\n  - {name: a, time: 0, num_gpus: 2, application: bert, batch_size: 48}\n"
                 "  - {name: b, time: 5, num_gpus: 1, duration_s: 60}\n")
    assert [j.name for j in load_workload(y).jobs] == ["a", "b"]


@pytest.mark.parametrize("body,where", [
    ("a,10,cifar10,4,512\nb,5,cifar10,4,512\n", "row 2 column time"),      # unsorted
    ("a,10,resnet,4,512\n", "row 1 column application"),                   # unknown application
    ("a,ten,cifar10,4,512\n", "row 1 column time"),                        # malformed number
    ("a,1,cifar10,0,512\n", "row 1 column num_replicas"),                  # not positive
    ("a,1,cifar10,2.5,512\n", "row 1 column num_replicas"),                # not whole
    ("a,1,cifar10,2,512,9\n", "row 1"),                                    # too many cells
])
def test_bad_rows_name_the_row(tmp_path, body, where):
    f = tmp_path / "w.csv"
    f.write_text(HEADER + body)
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert where in str(e.value)


def test_unknown_header(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="header"):
        load_workload(f)


def test_too_many_gpus_names_row(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text(HEADER + "a,1,cifar10,4,512\nb,2,cifar10,65,512\n")
    with pytest.raises(InputError, match="row 2 column num_replicas"):
        check_fits(load_workload(f), {"T4": 64})


def test_clusters():
    c = pollux_cluster()
    assert c.total_gpus == 64 and len(c.nodes) == 16 and c.gpu_types == ("T4",)
    h = load_cluster("examples/clusters/hetero-t4-v100-a100.yaml")
    assert len(h.gpu_types) == 3 and h.total_gpus == 96
    assert load_cluster("examples/clusters/pollux-16x4-t4.yaml").describe() == c.describe()


@pytest.mark.parametrize("data,field", [
    ({"nodes": [{"gpu": "T5", "gpus_per_node": 4}]}, "nodes[0].gpu"),
    ({"nodes": [{"gpu": "T4", "gpus_per_node": 0}]}, "nodes[0].gpus_per_node"),
    ({"nodes": []}, "nodes"),
    ({"nodes": [{"gpu": "T4", "gpus_per_node": 4, "colour": 1}]}, "colour"),
])
def test_bad_cluster(data, field):
    with pytest.raises(InputError) as e:
        cluster_from_dict(data, "c.yaml")
    assert field in str(e.value)


@pytest.mark.parametrize("body,where", [
    ("a,0,2,cifar10,256,,H900,,\n", "row 1 column gpu_type"),   # unknown GPU type
    ("a,0,2,,,,,,\n", "row 1 column application"),              # neither application nor duration
    ("a,0,2,bert,48,,,96,24\n", "row 1 column min_batch"),      # empty batch range
    ("a,0,2,bert,48,,,,\na,5,1,,,60,,,\n", "row 2 column name"),  # duplicate name
])
def test_own_format_errors_name_the_row(tmp_path, body, where):
    f = tmp_path / "w.csv"
    f.write_text("name,time,num_gpus,application,batch_size,duration_s,gpu_type,min_batch,max_batch\n" + body)
    with pytest.raises(InputError) as e:
        load_workload(f)
    assert where in str(e.value)


def test_gpu_type_missing_from_cluster(tmp_path):
    f = tmp_path / "w.csv"
    f.write_text("name,time,num_gpus,application,batch_size,duration_s,gpu_type,min_batch,max_batch\n"
                 "a,0,2,cifar10,256,,A100,,\n")
    with pytest.raises(InputError, match="row 1 column gpu_type"):
        check_fits(load_workload(f), {"T4": 64})


def test_workload_without_jobs_is_refused(tmp_path):
    for name, text in (("h.csv", "name,time,application,num_replicas,batch_size\n"), ("h.yaml", "jobs: []\n")):
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(InputError, match="no jobs"):
            load_workload(f)


def test_cli_refuses_non_finite_restart(capsys):
    from gpuwise.cli.main import main

    assert main(["simulate", "--workload", "examples/workloads/small.csv", "--policy", "fifo",
                 "--restart-s", "nan"]) == 2
    assert "--restart-s" in capsys.readouterr().err
