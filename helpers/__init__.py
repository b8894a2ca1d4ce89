"""The code the notebooks share: what the lessons write, saved from them, and the plumbing a learner need not read.

Where each part lives (folder/module · its one job · the notebooks that import it; a test keeps this map true):

    lessons/                    generated from the notebooks' `#@save` cells: never edit by hand      04 05 06 07 08 99
      tfrecord_conversion.py    the record format, `write_tfrecords`, `parse_batch`, `read_tfrecords` (02)
      pydataset_autoencoder.py  PyDatasets over arrays and PNG files, the autoencoder, tf.data PNGs (03)
      tfdata_mnist.py           the training pipeline over plain file lists, cached, the article's MLP (04)
      pipeline_profiling.py     block records over lists of files, the article's pipeline (05)
      scaling_out.py            the multi-worker loop, tf.data service servers, the Beam pipeline (06)
      capstone_photos.py        the photo records, the photo pipelines, the classifier (07)
      resume_shuffle_grain.py   the id-logging MLP, exact resume with `fit`, index shuffles, Grain (08)
    setup/config.py             quick mode, the data folder, the repository's address                01 02 03 04 05 06 07 08 99
    setup/notebook.py           the setup cell: quiet TensorFlow, seeds, versions, the branch        01 02 03 04 05 06 07 08 99
    setup/accelerator.py        the CPU or GPU branch, and the GPU branch rehearsed on a CPU          -
    setup/processes.py          child processes that stop with their parent; ports                   -
    setup/check.py              is this machine ready: versions, data, disk, servers, platform       -
    data/datasets.py            MNIST and CIFAR-10 from data/, Keras's cache or a download           01 02 03 04 05 06 08 99
    data/standins.py            generated stand-ins for quick mode without the real files            -
    data/photo_sized.py         MNIST digits enlarged to a photo's size, in splits of so many MiB    05
    data/photos.py              a folder of JPEG photos cut from scikit-image's, and bad files       07
    storage/files.py            atomic writes, locks, safe names, checksums, what is not a file      -
    storage/labels.py           the one check of class labels: every writer, every label file read   -
    storage/tfrecord/           sharded TFRecord files: format, manifest, write, read, check         02 04 05 06 07
    storage/blocks.py           block records' file names, index and integrity                       05 08 99
    storage/array_record.py     ArrayRecord shards for Grain: atomic, resumable, with a manifest;    08
                                batch reads, one call per shard
    storage/png_folder.py       folders of PNG files with a label file                               03
    storage/packed_images.py    images as raw uint8 in one .npy file, for a memory map               03
    storage/photo_scan.py       every file of a photo folder looked at: what it is, whether usable   07
    storage/slow_store.py       a folder served read-only through FUSE with a remote store's waits  04 05 07
    measure/core.py             the timing core: intervals of the median, alternating rounds        02 03 04 05 06 07 08
    measure/gpu_reference.py    how fast a reference GPU trains the series' models                  05
    measure/full_run.py         the maintainers' last full benchmark run, read by key               99
                                (last_full_run.txt beside it, installed with the package)
    measure/report.py           a measurement reported in one line: verdict, comparison, GPU        01 02 03 04 05 06 08 99
                                appetite, dot plot, table
    measure/figures_by_row.py   the stored full run's figures behind a table of choices, by row      99
    measure/padding.py          how much of a batch of token sequences is padding, counted           99
    measure/model_charts.py     a classifier's mistakes drawn: predicted test images, confusion matrix  04
    measure/peak_memory.py      one training epoch in a fresh process: its peak memory, a budget     05
    measure/memory_budget.py    one epoch loaded or streamed, in children under a memory budget      05
    measure/grain_rates.py      08's rates: training from each loader on each backend, Grain's     08
                                forms alone against tf.data and the GPU
    measure/diagnose.py         the method packaged: three timings, waiting and CPU shares, verdict  05 99
    measure/timelines.py        pipeline timelines recorded as they run: stage spans, waits, steps   05
    measure/timeline_chart.py   pipeline timelines drawn side by side                                05
    measure/one_core.py         a pipeline alone in a child pinned to one CPU, and the copy ceiling  07
    measure/photo_charts.py     notebook 07's pictures: a photo folder, test photos and their guesses  07
    measure/model_cost.py       a model's multiply-adds, and a GPU's appetite carried over by them   07
    measure/cold_read.py        dropping files from the page cache, raw reads from the disk, RAM     05
    measure/plots.py            charts of 01 and 02: peak memory, images, training curves, labels    01 02 04 07
    measure/threads.py          the GIL measured: one thread against two, and the cores kept busy    01
    measure/input_alone.py      the input alone as `fit` takes it (an idle model), the model alone   03
    measure/tfrecord_encodings.py  TFRecord encodings' bytes, write and read times; the article's   02
                                writer against write_shards
    measure/arrivals.py         which records arrived, how often: through a service, into `fit`     06
    scale/data_service.py       a tf.data service here: the dispatcher in-process, worker processes,  06
                                a worker killed
    scale/multi_worker.py       starting the multi-worker training processes                         06
    scale/beam.py               the Beam conversion's source files and its job launcher              06
    scale/parallel_conversion.py  photos converted to record shards by several processes at once    07
    diagrams.py                 diagrams of the pipelines and clusters, drawn with matplotlib        04 06
    training_runs/killed_run.py  training runs killed by SIGKILL mid-epoch, threads of a child       08
    training_runs/other_backend.py  the same training on another Keras backend, in a child process  08

A module that lists no notebook is used by other helpers, the tests or the benchmarks. `measure/core.py` is
imported as `helpers.measure`.
"""
