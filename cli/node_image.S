// muster-node's bytes inside muster: what the bundle ships as its muster. Carried here, not
// looked up beside muster, so that muster's build id (which names the bundle on every node)
// changes whenever muster-node does, and muster stays one file to copy or install.
// MUSTER_NODE_PATH is the stripped muster-node (cli/CMakeLists.txt).
        .section .rodata.muster_node,"a"
        .balign 16
        .globl muster_node_image
        .type muster_node_image, @object
muster_node_image:
        .incbin MUSTER_NODE_PATH
        .globl muster_node_image_end
        .type muster_node_image_end, @object
muster_node_image_end:
        .section .note.GNU-stack,"",@progbits
