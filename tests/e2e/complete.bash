# Drives muster's bash completion as bash does on TAB: complete.bash COMPLETION_FILE LINE
# prints the candidates for the end of LINE, one per line. PATH must find the muster to ask
# (the -H case runs `muster plan`). Run with bash.
source /usr/share/bash-completion/bash_completion
source "$1"
# compopt works only inside a completion that bash started; here it has nothing to change.
compopt() { builtin compopt "$@" 2>/dev/null || true; }
line=$2
read -r -a COMP_WORDS <<<"$line"
[[ $line == *" " ]] && COMP_WORDS+=("")
COMP_LINE=$line
COMP_POINT=${#line}
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
COMPREPLY=()
_muster muster "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
printf '%s\n' "${COMPREPLY[@]}"
