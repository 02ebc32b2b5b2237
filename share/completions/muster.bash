# bash completion for muster: subcommands, flags, the values of flags that take a fixed set,
# files for the flags that take one, and for -H the hosts of the cluster file given with -f.
# Installed to share/bash-completion/completions/muster; bash-completion loads it on demand.

_muster_hosts_of_cluster_file() {
    # The hosts muster would use, as `muster plan` expands them (host lists included);
    # nothing when the file is not a valid cluster file.
    local file=$1
    [[ -r $file ]] || return
    "${_muster_binary:-muster}" plan -f "$file" --json 2>/dev/null |
        sed -n 's/^      "host": "\(.*\)",\{0,1\}$/\1/p' | sort -u
}

_muster() {
    local cur prev words cword
    _init_completion -n =: || return
    local _muster_binary=${words[0]}

    local subcommands="doctor health run stacks smoke topo plan ping exec hostlist bundle help"
    local sub="" i
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -*) ;;
            *) sub=${words[i]}; break ;;
        esac
    done
    if [[ -z $sub ]]; then
        COMPREPLY=($(compgen -W "$subcommands --help --version" -- "$cur"))
        return
    fi
    # After `--` come the job's own words: complete them as commands and files.
    for ((i = 1; i < cword; i++)); do
        if [[ ${words[i]} == -- ]]; then
            _command_offset $((i + 1))
            return
        fi
    done

    local cluster="-f --cluster --hostfile -H --hosts --launcher"
    local remote="--fanout --no-ship --heartbeat-timeout"
    local flags
    case $sub in
        run) flags="$cluster -n --np --map-by $remote -x --export --chdir --tag --bind --mpi --report-bindings --grace --timeout --stall --restarts --spares -N --nodes --drain-bad --json" ;;
        stacks) flags="--json" ;;
        plan) flags="$cluster -n --np --map-by --json --mpi --spares -N --nodes" ;;
        topo) flags="--xml --json" ;;
        exec) flags="$cluster --fanout --fold -N --no-prefix --tag" ;;
        ping) flags="$cluster $remote --count --bandwidth --search --matrix --json --html" ;;
        smoke) flags="$cluster -n --np --map-by $remote -x --export --bind --backend --min-bytes --max-bytes --step-factor --iters --warmup --split --pairs --timeout --json --html" ;;
        doctor) flags="$cluster -n --np --map-by $remote --only --skip --stress --strict --json --junit --prometheus --html" ;;
        health) flags="-f --cluster --file --fsroot --timeout --drain --record --accept-counters --stress --strict --json --junit --prometheus --html" ;;
        hostlist) flags="-e --expand --fold -c --count" ;;
        bundle) flags="" ;;
        help) COMPREPLY=($(compgen -W "${subcommands% help}" -- "$cur")); return ;;
        *) return ;;
    esac
    flags+=" -h --help"

    case $sub:$prev in
        *:-f | *:--cluster) _filedir '@(yaml|yml)'; return ;;
        *:--hostfile | topo:--xml | doctor:--json | doctor:--junit | doctor:--prometheus | \
            health:--json | health:--junit | health:--prometheus | *:--html) _filedir; return ;;
        health:--fsroot | run:--chdir) _filedir -d; return ;;
        *:--map-by) COMPREPLY=($(compgen -W "slot node" -- "$cur")); return ;;
        *:--launcher) COMPREPLY=($(compgen -W "auto ssh slurm" -- "$cur")); return ;;
        *:--bind) COMPREPLY=($(compgen -W "core numa none" -- "$cur")); return ;;
        *:--mpi) COMPREPLY=($(compgen -W "auto pmix pmi1 none" -- "$cur")); return ;;
        *:--backend) COMPREPLY=($(compgen -W "auto nccl gloo" -- "$cur")); return ;;
        *:--split) COMPREPLY=($(compgen -W "node" -- "$cur")); return ;;
        exec:--tag) COMPREPLY=($(compgen -W "host pdsh none" -- "$cur")); return ;;
        *:--tag) COMPREPLY=($(compgen -W "rank host host-rank none" -- "$cur")); return ;;
        *:--only | *:--skip)
            # A comma-separated list of stages: complete the last one.
            local stages="cluster ssh topology health network launch smoke"
            local head=${cur%"${cur##*,}"}
            COMPREPLY=($(compgen -P "$head" -W "$stages" -- "${cur##*,}"))
            compopt -o nospace
            return ;;
        *:-H | *:--hosts)
            # Hosts of the cluster file given with -f, after the last comma of the list.
            local file=""
            for ((i = 1; i < cword - 1; i++)); do
                [[ ${words[i]} == -f || ${words[i]} == --cluster ]] && file=${words[i + 1]}
            done
            local head=${cur%"${cur##*,}"}
            [[ -n $file ]] && COMPREPLY=($(compgen -P "$head" -W "$(_muster_hosts_of_cluster_file "${file/#\~/$HOME}")" -- "${cur##*,}"))
            compopt -o nospace
            return ;;
        *:-n | *:--np | *:--fanout | *:--heartbeat-timeout | *:-x | *:--export | *:--grace | \
            *:--timeout | *:--stall | *:--count | *:--min-bytes | *:--max-bytes | *:--step-factor | \
            *:--iters | *:--warmup | *:--restarts | *:--spares | run:-N | plan:-N | *:--nodes)
            return ;;  # a value of the user's own
    esac
    if [[ $cur == -* || $sub == bundle || $sub == topo || $sub == plan || $sub == ping || $sub == doctor || $sub == health ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    fi
    [[ $sub == bundle && $cur != -* ]] && _filedir -d
}
complete -F _muster muster
