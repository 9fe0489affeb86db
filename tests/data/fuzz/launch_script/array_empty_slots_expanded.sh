arr[65535]=1
w="x x x x x x x x x x x x x x x x"
for a in $w; do for b in $w; do for c in $w; do for d in $w; do x=("${arr[@]}"); done; done; done; done
