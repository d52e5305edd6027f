"""The files `autoexp init` writes: a starter experiment and a config/ skeleton.

Kept as text (not package data) so that the comments, which are the point, stay next to
the command that writes them. tests/unit/cli/test_init_cmd.py plans and composes every one.
"""

from __future__ import annotations

EXPERIMENT = """\
# A starter experiment written by `autoexp init`. It runs here, no Slurm needed:
#   autoexp run experiment.yaml
# It trains a tiny language model on the CPU with the package's own resumable workload
# (needs torch: pip install 'oellm-autoexp[torch]'), checkpoints every 5 iterations and
# resumes from the newest checkpoint when the restart policy restarts it.
#
# Config groups are looked up, first match wins: --config-dir, $AUTOEXP_CONFIG_DIR, the
# config/ directory beside this file (your own groups: config/README.md), then the groups
# shipped with autoexp. `autoexp config show experiment.yaml` says where each key came from.
defaults:
  - slurm: local  # the preset for the local executor
  - backend: command  # any argv, set below
  - monitoring: autoexp_workloads  # the log patterns of the workload below
  - restart: megatron_transient  # restart hangs, crashes, node trouble; stop on OOM, NaN, bugs

# To Slurm: `executor: slurm` and `- slurm: my_cluster` (config/slurm/my_cluster.yaml, fill
# in your partition and account) or a shipped preset (`- slurm: juwels`). Try it first with
#   autoexp plan experiment.yaml executor=slurm slurm=my_cluster
# which renders the sbatch script and submits nothing.
#
# To Megatron-LM (pip install 'oellm-autoexp[megatron]', or your own Megatron-LM checkout
# in $MEGATRON_PATH; DATA_PATH and TOKENIZER_MODEL in the environment), use these defaults
# and drop `backend:` below; the model's arguments go under `backend.megatron`:
#   - slurm: my_cluster
#   - backend: megatron_torchrun  # torchrun $MEGATRON_PATH/pretrain_gpt.py
#   - backend/megatron: llama1_8b_qkln  # a model preset; copy it into config/backend/megatron/ to change it
#   - monitoring: megatron_production
#   - restart: megatron_transient

experiment:
  name: starter
  output_dir: outputs/${experiment.name}

executor: local

backend:
  # `python` is the interpreter autoexp is installed in (activate its virtual environment).
  command:
    - python
    - -m
    - oellm_autoexp.workloads.train
    - --steps
    - "20"
    - --save-interval
    - "5"
    - --device
    - cpu
    - --ckpt-dir
    - ${experiment.output_dir}/checkpoints
"""

CONFIG_README = """\
# Your own config groups

A directory per group, a YAML file per option: `slurm/my_cluster.yaml` is option
`my_cluster` of group `slurm`, chosen in an experiment's defaults with `- slurm: my_cluster`
or on the command line with `slurm=my_cluster`.

| group | what an option holds |
| --- | --- |
| `backend/` | the launch command: `command`, `torchrun`, `megatron_torchrun` (and `backend/megatron/` model presets) |
| `slurm/` | a cluster preset: nodes, GPUs, `#SBATCH` options, environment |
| `monitoring/` | log patterns (`include:` a shipped set, then add your own) |
| `restart/` | a restart policy: which failures restart, how often |
| `sweeps/` | a grid of values, one job per point |
| `experiments/` | whole experiments, runnable by name: `autoexp run NAME` |

This directory is found because it sits beside the experiment file. The search order, first
match wins: `--config-dir`, `$AUTOEXP_CONFIG_DIR`, this `config/`, then the groups shipped
with autoexp, so a file here with a shipped option's name replaces that option.
`autoexp config show experiment.yaml` lists each directory searched and where every key came from.
"""

SLURM_PRESET = """\
# A Slurm preset for your cluster: group `slurm`, option `my_cluster`. Use it with
#   autoexp plan experiment.yaml executor=slurm slurm=my_cluster   # render only
#   autoexp run  experiment.yaml executor=slurm slurm=my_cluster   # submit and monitor
# Every `sbatch:` key becomes an `#SBATCH --key=value` line. ${oc.env:NAME,default} reads
# the environment when the experiment is loaded.
nodes: 1
gpus_per_node: 0
cpus_per_task: 2
sbatch:
  partition: ${oc.env:AUTOEXP_PARTITION,batch}
  account: ${oc.env:SLURM_ACCOUNT,my_account}
  time: "00:30:00"
"""

FILES: dict[str, str] = {
    "experiment.yaml": EXPERIMENT,
    "config/README.md": CONFIG_README,
    "config/slurm/my_cluster.yaml": SLURM_PRESET,
}
