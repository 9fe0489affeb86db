w="x x x x x x x x x x x x x x x x"
for a in $w; do for b in $w; do for c in $w; do for d in $w; do unset arr; arr[65535]=1; done; done; done; done
