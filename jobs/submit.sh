#!/bin/bash
# sbatch, after the checks a queue would otherwise answer late or vaguely; `make -f Makefile.slurm
# submit` runs it:
#   jobs/submit.sh [sbatch options...] SCRIPT
# - The partition's name on this site: where the site profile (MPITRON_SITE_ENV, the file the
#   job sources as SITE_ENV) sets PARTITION_<NAME> (NAME upper-cased, '-' as '_'), -p NAME (or the
#   script's #SBATCH --partition=NAME) becomes -p <that>. E.g. in a site file:
#     PARTITION_RM=cpu PARTITION_RM_SHARED=cpu-shared PARTITION_GPU=gpu PARTITION_GPU_SHARED=gpu-shared
# - The partition exists (sinfo -h -p NAME).
# - The account (-A) is one of the user's, where accounting answers (sacctmgr -n show assoc).
# - The ranks fit: no more nodes than the partition has, and per node no more ranks x cores per
#   rank than its largest node's CPUs (Slurm refuses some of these only vaguely, queues others).
# The options are the command line's, else the script's #SBATCH lines; anything else passes through.
set -euo pipefail

fail() {
  echo "error: $*" >&2
  exit 1
}

[[ $# -ge 1 ]] || fail "usage: jobs/submit.sh [sbatch options...] SCRIPT"
script=${!#}
[[ -f $script ]] || fail "the batch script $script does not exist"

# The resource options of a word list: partition account nodes ntasks per_node cpus.
declare -A opt=()
parse() {
  local a next=""
  for a in "$@"; do
    if [[ -n $next ]]; then
      opt[$next]=$a
      next=""
      continue
    fi
    case $a in
      -p) next=partition ;;
      --partition=*) opt[partition]=${a#*=} ;;
      -A) next=account ;;
      --account=*) opt[account]=${a#*=} ;;
      -N) next=nodes ;;
      --nodes=*) opt[nodes]=${a#*=} ;;
      -n) next=ntasks ;;
      --ntasks=*) opt[ntasks]=${a#*=} ;;
      --ntasks-per-node=*) opt[per_node]=${a#*=} ;;
      -c) next=cpus ;;
      --cpus-per-task=*) opt[cpus]=${a#*=} ;;
    esac
  done
}
mapfile -t header < <(sed -n '2,/^[^#]/s/^#SBATCH //p' "$script" | tr -s '[:blank:]' '\n')
parse "${header[@]}"
partition=${opt[partition]:-}
unset 'opt[partition]'
parse "${@:1:$#-1}"
given_p=${opt[partition]:-}
partition=${given_p:-$partition}

# The site's name of the partition.
site=${MPITRON_SITE_ENV:-none}
key=PARTITION_$(tr '[:lower:]-' '[:upper:]_' <<<"${partition:-<NAME>}")
mapped=""
if [[ -n $partition && $site != none ]]; then
  [[ -f $site ]] || fail "the site profile $site (SITE_ENV) does not exist"
  # In a subshell: the profile's module loads stay out of the job's environment.
  # shellcheck source=/dev/null
  mapped=$(
    set +eu
    source "$site" >/dev/null 2>&1
    echo "${!key:-}"
  )
fi
args=("$@")
if [[ -n $mapped && $mapped != "$partition" ]]; then
  echo "partition $partition is $mapped here ($key in $site)"
  if [[ -z $given_p ]]; then
    args=(-p "$mapped" "$@")
  else
    args=()
    prev=""
    for a in "$@"; do
      case $prev:$a in
        -p:*) args+=("$mapped") ;;
        *:--partition=*) args+=("--partition=$mapped") ;;
        *) args+=("$a") ;;
      esac
      prev=$a
    done
  fi
  partition=$mapped
fi

# The ranks asked for (checked against the partition's nodes and cores below).
num() { [[ $1 =~ ^([0-9]+) ]] && echo "${BASH_REMATCH[1]}"; }
nodes=$(num "${opt[nodes]:-1}") || nodes=1
cpus=$(num "${opt[cpus]:-1}") || cpus=1
if [[ -n ${opt[ntasks]:-} ]]; then
  ranks=$(num "${opt[ntasks]}") || ranks=1
  per_node=$(((ranks + nodes - 1) / nodes))
  # The training scripts refuse ranks that do not fill their nodes evenly (jobs/train_body.sh).
  if [[ -n ${opt[per_node]:-} ]] && ((ranks != nodes * $(num "${opt[per_node]}"))); then
    fail "$ranks rank(s) on $nodes node(s) with --ntasks-per-node=${opt[per_node]} (the command line's," \
      "else $script's): the job would get other ranks than that, or refuse them; ask for a multiple" \
      "of the nodes (RANKS = NODES x ranks a node)"
  fi
else
  per_node=$(num "${opt[per_node]:-1}") || per_node=1
  ranks=$((nodes * per_node))
fi
where=${partition:+partition $partition}
where=${where:-the default partition}
if [[ -n $partition ]]; then
  nodes_of=$(sinfo -h -p "$partition" -N -o '%N %c' 2>/dev/null | sort -u || true)
  if [[ -z $nodes_of ]]; then
    fail "partition '$partition' does not exist on this cluster (sinfo -h -p $partition lists nothing;" \
      "partitions: $(sinfo -h -o %R 2>/dev/null | sort -u | paste -sd ' ')): set PARTITION to one of" \
      "them, or map the name in the site profile (SITE_ENV, now $site): $key=<site's name>"
  fi
else
  nodes_of=$(sinfo -h -N -o '%N %c' 2>/dev/null | sort -u || true)
fi

account=${opt[account]:-}
if [[ -n $account ]] && assoc=$(sacctmgr -n -P show assoc where user="$(id -un)" format=account 2>/dev/null); then
  if ! grep -qixF "$account" <<<"$assoc"; then
    fail "account '$account' is not one of yours on this cluster (sacctmgr show assoc:" \
      "$(sort -u <<<"$assoc" | paste -sd ' ')): set ACCOUNT to one of them"
  fi
fi

if [[ -n $nodes_of ]]; then
  have=$(wc -l <<<"$nodes_of")
  max_cpus=$(awk '{ c = $2 + 0; if (c > m) m = c } END { print m + 0 }' <<<"$nodes_of")
  ((nodes <= have)) ||
    fail "$nodes node(s) asked for, but $where has $have: ask for fewer nodes (NODES)"
  ((per_node * cpus <= max_cpus)) ||
    fail "$ranks rank(s) on $nodes node(s) are $per_node a node x $cpus core(s) a rank = $((per_node * cpus))" \
      "cores a node, but the nodes of $where have at most $max_cpus CPUs (sinfo): ask for fewer ranks" \
      "(RANKS, GPUS) or cores a rank (CPUS), or more nodes (NODES)"
fi
exec sbatch "${args[@]}"
