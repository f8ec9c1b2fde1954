#!/bin/bash
# Configure and start a single-node Slurm (munge + slurmctld + slurmd) on this machine, for the
# tests that submit real sbatch jobs (tests/runtime/test_train_launch_slurm.py).
#
# Needs root and Debian's packages:  apt-get install -y slurmctld slurmd slurm-client munge
# (or the slurm-wlm metapackage). No systemd and no cgroups are needed: proctrack/linuxproc,
# task/none and no accounting, so it works in containers and microVMs.
#
# Idempotent: with its config in place and the node usable it does nothing; a config it wrote
# earlier that differs (another host name, CPU count, or a newer version of this script) is
# rewritten and the daemons restarted. Exit 0 when the node is idle and accepting jobs,
# non-zero with one line on stderr otherwise.
set -euo pipefail

CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARK="# written by langadapt tests/helpers/start_slurm.sh"
HOST="$(hostname -s)"

die() { echo "start_slurm.sh: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (it writes /etc/slurm and starts daemons)"
for bin in munged slurmctld slurmd sinfo scontrol; do
  command -v "$bin" >/dev/null || die "$bin not found: apt-get install -y slurmctld slurmd slurm-client munge"
done

node_ready() {
  # The node is usable once it is idle/mixed/allocated (not down, drained or unknown).
  local state
  state="$(sinfo -h -N -n "$HOST" -o '%t' 2>/dev/null | head -n 1)" || return 1
  case "$state" in idle|mix|alloc|comp) return 0 ;; *) return 1 ;; esac
}

# Slurm schedules at least 4 CPUs even on a 2-core machine so that 2-4 task test jobs fit;
# SlurmdParameters=config_overrides lets the configured count exceed the real one.
CPUS="$(nproc)"
[ "$CPUS" -ge 4 ] || CPUS=4
MEM_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)"

# --- munge: one key, daemon as the munge user --------------------------------------------
if [ ! -s /etc/munge/munge.key ]; then
  if command -v mungekey >/dev/null; then mungekey --create --force; else
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; fi
fi
chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key
mkdir -p /run/munge /var/log/munge /var/lib/munge
chown munge:munge /run/munge /var/log/munge /var/lib/munge
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- munged --force
  sleep 1
  munge -n | unmunge >/dev/null || die "munged started but munge/unmunge round trip failed"
fi

# --- slurm.conf -------------------------------------------------------------------------
mkdir -p "$CONF_DIR" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
chown slurm:slurm /var/spool/slurmctld /var/log/slurm
NODE="NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN"
if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
  die "$CONF exists and was not written by this script; refusing to overwrite it"
fi
WANT="$(cat <<EOF
$MARK
ClusterName=langadapt-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=slurm
AuthType=auth/munge
# Credentials live 10 s instead of 120: a requeued job may start again after that long (the
# tests requeue on purpose and should not wait two minutes).
AuthInfo=cred_expire=10
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
# Look at pending jobs every 2 s (default 60): a requeued job then starts as soon as it may.
SchedulerParameters=sched_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
JobRequeue=1
KillWait=5
MinJobAge=300
$NODE
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
)"
if [ "$(cat "$CONF" 2>/dev/null)" != "$WANT" ]; then
  printf '%s\n' "$WANT" > "$CONF"
  # A changed config must reach running daemons: restart them below.
  for pidfile in /run/slurm/slurmd.pid /run/slurm/slurmctld.pid; do
    if [ -f "$pidfile" ]; then kill "$(cat "$pidfile")" 2>/dev/null || true; fi
  done
  sleep 2
fi

# --- daemons ----------------------------------------------------------------------------
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
if node_ready && pid_alive /run/slurm/slurmctld.pid && pid_alive /run/slurm/slurmd.pid; then
  echo "start_slurm.sh: slurm already running on $HOST"
  exit 0
fi
pid_alive /run/slurm/slurmctld.pid || slurmctld
for _ in $(seq 1 20); do scontrol ping >/dev/null 2>&1 && break; sleep 0.5; done
scontrol ping | grep -q UP || die "slurmctld did not come up; see /var/log/slurm/slurmctld.log"
pid_alive /run/slurm/slurmd.pid || slurmd

for _ in $(seq 1 40); do
  node_ready && { echo "start_slurm.sh: slurm up on $HOST ($CPUS CPUs)"; exit 0; }
  # A node left DOWN by an earlier unclean stop is brought back explicitly.
  case "$(sinfo -h -N -n "$HOST" -o '%t' 2>/dev/null)" in
    down*|drain*) scontrol update NodeName="$HOST" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.5
done
die "node $HOST not idle after 20 s: $(sinfo -h -N -o '%N %t %E' 2>&1); see /var/log/slurm/slurmd.log"
