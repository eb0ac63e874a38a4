#!/bin/bash
# A single-node Slurm cluster on this machine, for the `slurm` tests: munged, slurmctld and slurmd
# on localhost, every file of theirs under DIR. Needs root and Debian's slurm-wlm and munge
# (apt-get install -y slurm-wlm munge).
#
#   scripts/ci/slurm.sh start DIR   # writes DIR/slurm.conf; prints SLURM_CONF=DIR/slurm.conf
#   scripts/ci/slurm.sh stop DIR
#
# The tests call it themselves (tests/test_launchers.py); CI only has to install the packages.
set -euo pipefail
cmd=${1:?start|stop}
dir=$(realpath -m "${2:?DIR}")
mkdir -p "$dir"/{state,spool,log,munge}
case "$cmd" in
start)
    if ! pgrep -x munged >/dev/null; then
        if [ ! -s /etc/munge/munge.key ]; then mungekey --create --force; fi
        mkdir -p /run/munge && chown munge:munge /run/munge 2>/dev/null || true
        sudo_munge() { if id munge >/dev/null 2>&1; then runuser -u munge -- "$@"; else "$@"; fi; }
        sudo_munge munged --force
    fi
    node=$(hostname -s)
    cpus=$(nproc)
    mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
    cat > "$dir/slurm.conf" <<CONF
ClusterName=grandrounds-ci
SlurmctldHost=$node(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=${SLURMCTLD_PORT:-16817}
SlurmdPort=${SLURMD_PORT:-16818}
AuthType=auth/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MaxArraySize=1001
SlurmdTimeout=30
InactiveLimit=0
KillWait=10
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF"
    for _ in $(seq 60); do
        if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
            echo "SLURM_CONF=$SLURM_CONF"
            exit 0
        fi
        sleep 0.5
    done
    echo "slurm did not come up; see $dir/log" >&2
    tail -5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
    ;;
stop)
    for pid in "$dir/slurmd.pid" "$dir/slurmctld.pid"; do
        if [ -s "$pid" ]; then kill "$(cat "$pid")" 2>/dev/null || true; fi
    done
    ;;
esac
